"""Modules loaded on first use (`importlib.util.LazyLoader`): the modules that validate a config name pandas and
scipy at the top, but a one-line error, `privfair list` or a skipped sweep never touches them, and importing them
costs about half a second of the CLI's start."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def module(name: str) -> ModuleType:
    """`name` as imported so far, else a module that imports itself on its first attribute access."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}")
    spec.loader = importlib.util.LazyLoader(spec.loader)
    lazy = importlib.util.module_from_spec(spec)
    sys.modules[name] = lazy
    spec.loader.exec_module(lazy)
    return lazy
