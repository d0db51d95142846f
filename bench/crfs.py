"""CR-FS family (crfs.md §1.9, issue item 7): the full figure grids of Figs. 3.2-3.5 — 4 datasets x (2 models + 2
query types) x 10 eps2 x 4 schemes (crfs, cdp_zhu, cdp_group, cdp_nonprivate) x 10 seeds, 10 noise draws inside
every run — through the plugins, in one process, with the memoised deterministic pieces (`crfs.memo`: Theta's kappa
per candidate feature set, the forests, the non-private ERM fits) shared across eps, tasks, schemes and noise
draws. Baseline, measured in the same process: the same runs with the cache off, on the first seed and one eps2
value of every dataset, extrapolated to the grid.

`python -m bench crfs` (seeds: $BENCH_CRFS_SEEDS, default 10). Prints wall and user+sys CPU seconds; the
issue's target is under 5 minutes on a 2-core machine.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np

from privfair_cli import datasets as data_lib
from privfair_cli import evaluate, registry
from privfair_cli.algorithms import crfs
from privfair_cli.config import load_card
from privfair_cli.privacy import Budget, PrivacyLedger

DATASETS = ("adult_3k", "breast_cancer_wdbc", "titanic_crfs", "porto_seguro_1770")
TASKS = ("lr", "svm", "count", "mean")
SCHEMES = ("crfs", "cdp_zhu", "cdp_group", "cdp_nonprivate")
EPS = tuple(round(0.1 * k, 1) for k in range(1, 11))


def cells(eps_grid):
    return [(algo, task, eps) for algo in SCHEMES for task in TASKS for eps in eps_grid
            if not (algo == "cdp_nonprivate" and task in ("count", "mean"))]  # no noise: MAE 0, not plotted


def run_grid(tables: dict, seeds, eps_grid) -> int:
    n = 0
    for table in tables.values():
        for seed in seeds:
            rng = np.random.default_rng(seed)
            train, test = data_lib.split(table, 0.15, rng)
            for algo, task, eps in cells(eps_grid):
                plugin = registry.make(algo, task=task, eps_release=eps, eps1=1.0, noise_draws=10)
                plugin.fit(train, Budget(math.inf), PrivacyLedger(Budget(math.inf)), np.random.default_rng(seed))
                evaluate.metrics_for(plugin, train, test, rng)
                n += 1
    return n


def clock():
    t = os.times()
    return time.perf_counter(), t.user + t.system + t.children_user + t.children_system


def main() -> None:
    seeds = range(int(os.environ.get("BENCH_CRFS_SEEDS", "10")))
    base = Path(os.environ.get("PRIVFAIR_DATA_DIR", ""))
    tables = {}
    for name in DATASETS:
        card = load_card(name)
        if not (base / (card.get("subdir") or name)).is_dir() and card.get("files"):
            print(f"{name}: dataset folder not found under PRIVFAIR_DATA_DIR, skipped")
            continue
        tables[name] = data_lib.load(card, np.random.default_rng(0))
    per_grid = len(cells(EPS)) * len(tables)
    # baseline: no cache, first seed, two eps values, extrapolated to the grid
    crfs.CACHE["enabled"] = False
    w0, c0 = clock()
    n_base = run_grid(tables, [0], EPS[:1])
    w1, c1 = clock()
    print(f"baseline (cache off): {n_base} runs, wall {w1 - w0:.1f} s, user+sys {c1 - c0:.1f} s", flush=True)
    crfs.CACHE["enabled"] = True
    crfs._CACHE.clear()
    w2, c2 = clock()
    n = run_grid(tables, seeds, EPS)
    w3, c3 = clock()
    base_wall = (w1 - w0) / n_base * per_grid * len(seeds)
    base_cpu = (c1 - c0) / n_base * per_grid * len(seeds)
    print(f"grid: {len(tables)} datasets x {len(TASKS)} tasks x {len(EPS)} eps x {len(SCHEMES)} schemes x "
          f"{len(seeds)} seeds (10 noise draws a run; non-private queries left out): {n} runs")
    print(f"memoised: wall {w3 - w2:.1f} s, user+sys {c3 - c2:.1f} s ({(w3 - w2) / max(n, 1) * 1000:.1f} ms a run)")
    print(f"baseline (cache off, {n_base} runs measured, extrapolated): wall {base_wall:.0f} s, "
          f"user+sys {base_cpu:.0f} s")
    print(f"ratio baseline / memoised: wall {base_wall / max(w3 - w2, 1e-9):.1f}x, "
          f"cpu {base_cpu / max(c3 - c2, 1e-9):.1f}x; target: grid under 300 s")
    if len(seeds) < 10:
        print(f"the 10-seed grid, extrapolated from {len(seeds)} seeds: wall {(w3 - w2) * 10 / len(seeds):.0f} s, "
              f"user+sys {(c3 - c2) * 10 / len(seeds):.0f} s")


if __name__ == "__main__":
    main()
