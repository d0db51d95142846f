import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "datasets"
if "PRIVFAIR_DATA_DIR" not in os.environ and SHARED.is_dir():
    os.environ["PRIVFAIR_DATA_DIR"] = str(SHARED)


def have_data(subdir: str) -> bool:
    base = os.environ.get("PRIVFAIR_DATA_DIR")
    return bool(base) and (Path(base) / subdir).is_dir()


def needs_data(subdir: str):
    """Skip a test when a real dataset folder is not available under PRIVFAIR_DATA_DIR."""
    return pytest.mark.skipif(not have_data(subdir), reason=f"dataset folder {subdir}/ not in PRIVFAIR_DATA_DIR")


# With PRIVFAIR_REQUIRE_DATA=1 (CI, where the shared datasets are present) a missing dataset fails its tests
# instead of skipping them.
REQUIRE_DATA = os.environ.get("PRIVFAIR_REQUIRE_DATA") == "1"
if REQUIRE_DATA:
    def needs_data(subdir: str):  # noqa: F811
        if not have_data(subdir):
            raise RuntimeError(f"PRIVFAIR_REQUIRE_DATA=1 but dataset folder {subdir}/ is not in PRIVFAIR_DATA_DIR")
        return pytest.mark.usefixtures()


# ------------------------------------------------------------------------------ card -> plugin -> ledger -> fit
def card(name: str, **overrides) -> dict:
    """The dataset card `configs/data/<name>.yaml` with `overrides`."""
    from omegaconf import OmegaConf

    from privfair_cli.config import config_dir

    return OmegaConf.to_container(OmegaConf.load(config_dir() / "data" / f"{name}.yaml"), resolve=True) | overrides


def table(name: str, seed: int = 0, **overrides):
    """A dataset loaded as a run loads it (card overrides such as n=500 apply), and its train / test split."""
    from privfair_cli import datasets, runner, schema

    rc_card = schema.validate_card(card(name, **overrides))
    rng = runner.streams(seed)
    data = runner.load_data(rc_card, rng, log=lambda *_: None)
    return datasets.split(data, rc_card.test_size, rng["split"])


def fit(algo: str, data, eps: float = 1.0, delta: float = 0.0, seed: int = 0, mechanism=None, **params):
    """Build `algo` from its YAML defaults with `params`, fit it on `data` through a fresh ledger; (plugin, ledger)."""
    import numpy as np

    from privfair_cli import registry
    from privfair_cli.privacy import Budget, PrivacyLedger

    plugin = registry.make(algo, mechanism, **params)
    budget = Budget(eps, delta or type(plugin).default_delta)
    ledger = PrivacyLedger(budget, getattr(plugin, "cfg", None) and getattr(plugin.cfg, "accountant", None)
                           or type(plugin).accountant)
    plugin.fit(data, budget, ledger, np.random.default_rng(seed))
    ledger.check()
    return plugin, ledger
