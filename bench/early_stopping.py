"""Early stopping (early_stopping.md): FastText epochs on IMDB, DP-SGD vs SGD, and the Bank / Health figure grids.

1. FastText on the IMDB card (2,500,301 parameters, the 7,497 training reviews left after the 25% validation
   hold-out, b = 64): epochs per second of DP-SGD (sigma = 1, C = 1: per-example norms in closed form, one Gaussian
   vector over all parameters per step) against non-private SGD of the same model, data, batches and dense update,
   in this process (target: a DP-SGD epoch within 2x a non-private one). `FASTTEXT_EPOCHS` epochs each.
2. For each logistic-regression card (`bank_es`, `health_es`): the figure grid end to end (Figs. 6.2 / 6.4, one
   process: `sgd` and `dpsgd_es` at the thesis' rates x 3 seeds, T = 40, sigma = 1, per-epoch validation and test
   history, all four stopping rules for the three fairness metrics), with the per-run seconds of each algorithm,
   their ratio, and the time of the stopping rules alone (post-processing of the history).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from privfair_cli import datasets as data_lib
from privfair_cli import evaluate, registry
from privfair_cli.privacy import Budget, PrivacyLedger

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "data"
SETTINGS = {"bank_es": {"lr": 0.02, "C": 0.3}, "health_es": {"lr": 0.2, "C": 0.4}}  # thesis §5 (DP-SGD column)
COMMON = {"model": "logistic", "epochs": 40, "batch_size": 256, "sigma": 1.0, "l2": 0.01, "validation_size": 0.25,
          "history": True, "reference": False, "accounting": "rdp"}  # the thesis' accountant, as its experiments'


def one(algo: str, train, test, params: dict, seed: int = 0) -> tuple[float, object]:
    plugin = registry.make(algo, **params)
    budget = Budget(100.0, 1e-5)
    ledger = PrivacyLedger(budget, type(plugin).accountant)
    t0 = time.perf_counter()
    plugin.fit(train, budget, ledger, np.random.default_rng(seed))
    evaluate.metrics_for(plugin, train, test, np.random.default_rng(seed + 1))
    return time.perf_counter() - t0, plugin


FASTTEXT_EPOCHS = 2
SGD_LR = {"bank_es": 0.02, "health_es": 0.06}   # thesis §5, SGD column
SEEDS = 3


def fasttext() -> None:
    import torch

    from privfair_cli.algorithms.dpsgd import XuSGDConfig  # noqa: F401  (registers the family)
    from privfair_cli.algorithms.dpsgd_trainer import TrainConfig, build_model, train

    card = OmegaConf.to_container(OmegaConf.load(CONFIGS / "imdb.yaml"))
    if not (Path(os.environ.get("PRIVFAIR_DATA_DIR", "")) / card["subdir"]).is_dir():
        print("imdb: dataset folder not found under PRIVFAIR_DATA_DIR, skipped")
        return
    rng = np.random.default_rng(0)
    train_rows, _ = data_lib.split(data_lib.load(card, rng), 0.0, rng)
    keep = np.sort(rng.permutation(len(train_rows))[len(train_rows) // 4:])  # the 25% validation hold-out
    table = train_rows.subset(keep)
    X = torch.as_tensor(table.X)
    y, s = torch.as_tensor(table.y), torch.as_tensor(table.s)
    n, b = len(table), 64
    seconds = {}
    for algorithm, lr in (("sgd", 0.9), ("dpsgd", 0.6)):
        cfg = TrainConfig(algorithm=algorithm, steps=FASTTEXT_EPOCHS * n // b, epochs=FASTTEXT_EPOCHS, batch_size=b,
                          lr=lr, C=1.0, sigma=1.0 if algorithm == "dpsgd" else 0.0, sigma1=0.0, l2=0.0,
                          l2_mode="after_noise", batch_sampling="poisson", groups=2, empty_group_fraction="one",
                          denominator="batch_fraction", group_mean_grad=False, keep_weights=True)
        torch.manual_seed(0)
        model = build_model("fasttext", table.d, 2, table.meta)
        t0 = time.perf_counter()
        train(model, "fasttext", X, y, s, cfg, np.random.default_rng(1))
        seconds[algorithm] = (time.perf_counter() - t0) / FASTTEXT_EPOCHS
    params = sum(p.numel() for p in model.parameters())
    print(f"fasttext on imdb: {n} training reviews, {params:,} parameters, b = {b} | sgd {1 / seconds['sgd']:.3f} "
          f"epochs/s ({seconds['sgd']:.1f} s/epoch) | dpsgd {1 / seconds['dpsgd']:.3f} epochs/s "
          f"({seconds['dpsgd']:.1f} s/epoch) | DP-SGD epoch / SGD epoch {seconds['dpsgd'] / seconds['sgd']:.2f} "
          f"(target <= 2) | a 100-epoch DP-SGD run ~{100 * seconds['dpsgd'] / 60:.0f} min")


def main() -> None:
    fasttext()
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
        grid = time.perf_counter()
        t_sgd = t_dp = 0.0
        for seed in range(SEEDS):
            t, _ = one("sgd", train, test, params | {"lr": SGD_LR[name]}, seed)
            t_sgd += t
            t, plugin = one("dpsgd_es", train, test, params, seed)
            t_dp += t
        grid = time.perf_counter() - grid
        t0 = time.perf_counter()
        plugin.stops()
        t_rules = time.perf_counter() - t0
        print(f"{name}: {len(train)} rows (before the 25% validation hold-out), 40 epochs | figure grid "
              f"({SEEDS} sgd + {SEEDS} dpsgd_es runs) {grid:.1f} s end to end | per run: sgd {t_sgd / SEEDS:.2f} s, "
              f"dpsgd_es {t_dp / SEEDS:.2f} s (ratio {t_dp / t_sgd:.2f}) | stopping rules {1000 * t_rules:.1f} ms")

if __name__ == "__main__":
    main()
