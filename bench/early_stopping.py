"""Early stopping (early_stopping.md): the Bank / Health grids of the figure and table sweeps end to end.

For each logistic-regression card (`bank_es`, `health_es`): one `dpsgd_es` run (T = 40, sigma = 1, the per-epoch
validation and test history, all four stopping rules for the three fairness metrics) against the non-private
`sgd` run of the same model, data and epochs with the same history (the baseline, measured in this process), and
the time of the stopping rules alone (post-processing of the history). Prints seconds, the ratio, and the
estimated time of a table grid (3 sigmas x 3 seeds) and a figure grid (sgd + dpsgd_es x 3 seeds).

The issue's other target, a DP-SGD epoch of the FastText model on IMDB within 2x a non-private epoch, is not
measured: the FastText model is not implemented.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from privfair_cli import datasets as data_lib
from privfair_cli import registry
from privfair_cli.privacy import Budget, PrivacyLedger

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "data"
SETTINGS = {"bank_es": {"lr": 0.02, "C": 0.3}, "health_es": {"lr": 0.2, "C": 0.4}}  # thesis §5 (DP-SGD column)
COMMON = {"model": "logistic", "epochs": 40, "batch_size": 256, "sigma": 1.0, "l2": 0.01, "validation_size": 0.25,
          "history": True, "reference": False}


def one(algo: str, train, test, params: dict) -> tuple[float, object]:
    plugin = registry.make(algo, **params)
    budget = Budget(100.0, 1e-5)
    ledger = PrivacyLedger(budget, type(plugin).accountant)
    t0 = time.perf_counter()
    plugin.fit(train, budget, ledger, np.random.default_rng(0))
    plugin.evaluate(train, test, np.random.default_rng(1))
    return time.perf_counter() - t0, plugin


def main() -> None:
    for name, own in SETTINGS.items():
        card = OmegaConf.to_container(OmegaConf.load(CONFIGS / f"{name}.yaml"))
        if not (Path(os.environ.get("PRIVFAIR_DATA_DIR", "")) / card["subdir"]).is_dir():
            print(f"{name}: dataset folder not found under PRIVFAIR_DATA_DIR, skipped")
            continue
        rng = np.random.default_rng(0)
        table = data_lib.load(card, rng)
        table = table.subset(np.sort(rng.choice(len(table), size=min(card["n"], len(table)), replace=False)))
        train, test = data_lib.split(table, card.get("test_size", 0.2), rng)
        params = COMMON | own
        t_sgd, _ = one("sgd", train, test, params)
        t_dp, plugin = one("dpsgd_es", train, test, params)
        t0 = time.perf_counter()
        plugin.stops()
        t_rules = time.perf_counter() - t0
        print(f"{name}: {len(train)} rows (before the 25% validation hold-out), 40 epochs | sgd {t_sgd:.2f} s | "
              f"dpsgd_es {t_dp:.2f} s "
              f"(ratio {t_dp / t_sgd:.2f}) | stopping rules {1000 * t_rules:.1f} ms | table grid (9 runs) "
              f"~{9 * t_dp:.0f} s, figure grid (3 sgd + 3 dpsgd_es) ~{3 * (t_sgd + t_dp):.0f} s")
    print("FastText on IMDB: not implemented, the DP-SGD vs non-private epoch (target <= 2x) is not measured")


if __name__ == "__main__":
    main()
