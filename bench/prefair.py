"""PreFair family: one `pfdr` release (measure, select, fit, sample) of Adult and of KDD census at eps = 1.

Prints seconds and the 2-way TVD of each release, plus the ratio of the release time to one pass of exact
2-way counting of the same table (the baseline, measured in this process with the release's own counting,
`prefair.histograms`). Targets on two cores: Adult under 10 s, KDD (300k rows, 42 attributes: the selection
scores all 861 pairs with an exact count each) under 2 s; the PreFair authors report minutes per release with
Private-PGM.
"""

from __future__ import annotations

import os
import time
from itertools import combinations
from pathlib import Path

import numpy as np

from privfair_cli import datasets as data_lib
from privfair_cli import metrics, registry
from privfair_cli.algorithms.prefair import DEFAULT_DELTA, histograms
from privfair_cli.config import load_card
from privfair_cli.privacy import Budget, PrivacyLedger


def one_release(name: str, eps: float = 1.0, seed: int = 0) -> None:
    card = load_card(name)
    if not (Path(os.environ.get("PRIVFAIR_DATA_DIR", "")) / card["subdir"]).is_dir():
        print(f"{name}: dataset folder not found under PRIVFAIR_DATA_DIR, skipped")
        return
    table = data_lib.load(card)
    X = table.frame.to_numpy(np.int64)
    domain = [int(table.domain[c]) for c in table.frame.columns]
    t0 = time.perf_counter()
    pairs = [c for c in combinations(range(len(domain)), 2) if domain[c[0]] * domain[c[1]] <= 10_000]
    histograms(X, domain, pairs)  # baseline: every exact 2-way table of at most 10,000 cells, once
    base = time.perf_counter() - t0
    budget = Budget(eps, DEFAULT_DELTA)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    plugin = registry.make("pfdr").fit(table, budget, PrivacyLedger(budget, "zcdp"), rng)
    t1 = time.perf_counter()
    synth = plugin.sample(plugin.n_rows(), rng)
    t2 = time.perf_counter()
    tvd2 = metrics.release_metrics(table.frame, synth, table.domain, plugin.cfg.max_cells)["tvd_2way"]
    print(f"{name}: n={len(table)} d={len(table.domain)} eps={eps:g}: release {t2 - t0:.2f} s "
          f"(measure+select+fit {t1 - t0:.2f} s, sample {len(synth)} rows {t2 - t1:.2f} s), tvd_2way={tvd2:.4f}, "
          f"{(t2 - t0) / base:.1f}x one pass of exact 2-way counting ({base:.2f} s)")


def main() -> None:
    for name in ("adult", "kdd"):
        one_release(name)


if __name__ == "__main__":
    main()
