import os
import sys
from pathlib import Path

import absl.logging
import pytest

# dp-accounting brings in absl, whose logging handler keeps the sys.stderr of the moment it is imported; imported
# inside a test, that is pytest's capture, which the handler then closes when an in-process Hydra run reconfigures
# logging, and every later test fails with "I/O operation on closed file". Point it at the real stderr, which absl
# never closes.
absl.logging.get_absl_handler().python_handler.stream = sys.__stderr__

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "datasets"
if "PRIVFAIR_DATA_DIR" not in os.environ and SHARED.is_dir():
    os.environ["PRIVFAIR_DATA_DIR"] = str(SHARED)


# With PRIVFAIR_REQUIRE_DATA=1 (CI, where the shared datasets are present) a missing dataset fails its tests
# instead of skipping them.
REQUIRE_DATA = os.environ.get("PRIVFAIR_REQUIRE_DATA") == "1"


def have_data(subdir: str) -> bool:
    base = os.environ.get("PRIVFAIR_DATA_DIR")
    return bool(base) and (Path(base) / subdir).is_dir()


def require_data(*subdirs: str) -> None:
    """The one way a test says it reads real dataset folders: skips it when one is missing under
    PRIVFAIR_DATA_DIR, or fails it when PRIVFAIR_REQUIRE_DATA=1."""
    missing = [s for s in subdirs if s and not have_data(s)]
    if missing:
        why = f"dataset folder(s) {', '.join(missing)} not in PRIVFAIR_DATA_DIR"
        if REQUIRE_DATA:
            pytest.fail(f"PRIVFAIR_REQUIRE_DATA=1 but {why}")
        pytest.skip(why)


def needs_data(*subdirs: str):
    """Decorator form of `require_data`: `@needs_data("adult")`."""
    return pytest.mark.needs_data(*subdirs)


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_data(*subdirs): reads these folders of PRIVFAIR_DATA_DIR")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("needs_data"):
        require_data(*mark.args)


# ------------------------------------------------------------------------------ card -> plugin -> ledger -> fit
def card(name: str, **overrides) -> dict:
    """The dataset card `data=<name>` as a run composes it (`config.load_card`), with `overrides`."""
    from privfair_cli.config import load_card

    return load_card(name) | overrides


def table(name: str, seed: int = 0, **overrides):
    """A dataset loaded as a run loads it (card overrides such as n=500 apply), and its train / test split."""
    from privfair_cli import runner, schema

    prepared = runner.prepare(schema.validate_card(card(name, **overrides)), seed, log=lambda *_: None)
    return prepared.train, prepared.test


def fit(algo: str, data, eps: float = 1.0, delta: float = 0.0, seed: int = 0, mechanism=None, **params):
    """Build `algo` from its YAML defaults with `params`, fit it on `data` through a fresh ledger; (plugin, ledger)."""
    import numpy as np

    from privfair_cli import registry, runner
    from privfair_cli.privacy import Budget

    plugin = registry.make(algo, mechanism, **params)
    budget = Budget(eps, delta or type(plugin).default_delta)
    accountant = getattr(plugin, "cfg", None) and getattr(plugin.cfg, "accountant", None) or type(plugin).accountant
    return plugin, runner.fit_plugin(plugin, data, budget, np.random.default_rng(seed), accountant=accountant)
