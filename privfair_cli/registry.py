"""The one place that maps names to plugins. A plain dict, filled by `@register` in the algorithm modules."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privfair_cli.errors import ConfigError

TASK_KINDS = ("classifier", "generator", "graph")

# Modules under privfair_cli.algorithms whose import registers plugins.
ALGORITHM_MODULES = ("logistic", "functional", "prefair", "causal", "dpsgd")  # torch-free ones first


class Plugin:
    """Base class of every algorithm plugin.

    A plugin is built from its algorithm config (`cfg.algo` minus `name`, as a plain dict of hyperparameters),
    then `fit(data, budget, ledger, rng, device)` is called once. Task kinds add:
      classifier: `predict(X) -> {0,1}` array (and `predict_proba` where it exists);
      generator:  `sample(n, rng) -> pandas.DataFrame` with the input's discrete schema;
      graph:      attribute `adjacency` (p x p 0/1 skeleton) and `cpdag` after fit.
    `extra_metrics()` may return plugin-specific numbers (flat name -> number) for metrics.json and
    A plugin may define `evaluate(train, test, rng) -> dict` to replace its kind's default evaluation
    (evaluate.py), e.g. to add the metrics its family's spec asks for.
    `artifacts(run_dir)` may write small files (weights, graphs, curves) into the run folder.
    """

    name: ClassVar[str]
    kind: ClassVar[str]
    mechanisms: ClassVar[tuple[str, ...]] = ()
    needs_delta: ClassVar[bool] = False
    cuda: ClassVar[bool] = False
    private: ClassVar[bool] = True
    accountant: ClassVar[str] = "basic"
    default_delta: ClassVar[float] = 0.0  # delta used when the run leaves delta=0 (e.g. 1e-9 for MST-style zCDP)

    def __init__(self, **params: Any):
        self.params = params

    def fit(self, data, budget, ledger, rng: np.random.Generator, device: str = "cpu") -> Plugin:
        raise NotImplementedError

    def extra_metrics(self) -> dict[str, float]:
        return {}

    def artifacts(self, run_dir) -> None:
        return None


@dataclass(frozen=True)
class PluginInfo:
    name: str
    kind: str
    mechanisms: tuple[str, ...]
    needs_delta: bool
    cuda: bool
    private: bool
    module: str


ALGORITHMS: dict[str, type[Plugin]] = {}


def register(cls: type[Plugin]) -> type[Plugin]:
    if cls.kind not in TASK_KINDS:
        raise ValueError(f"plugin {cls.name}: kind must be one of {TASK_KINDS}")
    if cls.name in ALGORITHMS and ALGORITHMS[cls.name] is not cls:
        raise ValueError(f"plugin name {cls.name!r} registered twice")
    ALGORITHMS[cls.name] = cls
    return cls


def load_plugins(until: str | None = None) -> dict[str, type[Plugin]]:
    """Import the algorithm modules, in order; with `until`, stop once that algorithm is registered (a run of
    the logistic family never imports torch, which only the DP-SGD module needs)."""
    for mod in ALGORITHM_MODULES:
        if until in ALGORITHMS:
            break
        try:
            importlib.import_module(f"privfair_cli.algorithms.{mod}")
        except ModuleNotFoundError as err:
            if err.name != f"privfair_cli.algorithms.{mod}":
                raise
    return ALGORITHMS


def get(name: str) -> type[Plugin]:
    plugins = load_plugins(until=name)
    if name not in plugins:
        raise ConfigError(f"algo={name!r} is not a registered algorithm; allowed: {', '.join(sorted(plugins))}")
    return plugins[name]


def info(cls: type[Plugin]) -> PluginInfo:
    return PluginInfo(cls.name, cls.kind, tuple(cls.mechanisms), cls.needs_delta, cls.cuda, cls.private,
                      cls.__module__.rsplit(".", 1)[-1])
