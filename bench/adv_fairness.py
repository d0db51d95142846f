"""Adversarial fairness attack: attacks per second of LowProFool and tabular DeepFool batched over the selected
examples (one torch pass per iteration for all of them) against the same primitive called one example at a time
(the baseline, measured in this process), on German credit (age) with the spec's MLP.

Prints wall seconds and user+sys CPU seconds of each, the attacks per second and the ratio. The issue's target, Table
7.2 end to end in under 15 minutes on 2 idle cores, is measured by timing `privfair reproduce zhang2022_table7_2`
(docs/benchmarks.md), not here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch

from privfair_cli import datasets as data_lib
from privfair_cli import registry
from privfair_cli.config import load_card
from privfair_cli.threads import torch_threads


def _clock():
    t = os.times()
    return time.perf_counter(), t.user + t.system


def _timed(fn):
    w0, c0 = _clock()
    out = fn()
    w1, c1 = _clock()
    return out, w1 - w0, c1 - c0


def main(m: int = 60, one_at_a_time: int = 10, max_iter: int = 2000) -> None:
    card = load_card("german_age")
    if not (Path(os.environ.get("PRIVFAIR_DATA_DIR", "")) / card["subdir"]).is_dir():
        print("german_age: dataset folder not found under PRIVFAIR_DATA_DIR, skipped")
        return
    table = data_lib.load(card)
    rng = np.random.default_rng(0)
    train, test = data_lib.split(table, 0.3, rng)
    plugin = registry.make("afa_lpf_pro", lpf_max_iter=max_iter, df_max_iter=max_iter)
    with torch_threads(1):
        _, fit_wall, fit_cpu = _timed(lambda: plugin.fit(train, None, None, rng))
        print(f"german_age: MLP {plugin.cfg.hidden} trained on {len(train)} rows x {plugin.cfg.epochs} epochs in "
              f"{fit_wall:.1f} s wall, {fit_cpu:.1f} s CPU")
        X = plugin._inputs(test)[:m]
        for attack in ("lowprofool", "deepfool"):
            plugin.attack_name = attack
            k = min(one_at_a_time, m)
            (_, ok), wall, cpu = _timed(lambda: plugin.perturb(X))
            (_, wall1, cpu1) = _timed(lambda k=k: [plugin.perturb(X[i:i + 1]) for i in range(k)])
            rate, rate1 = m / wall, k / wall1
            print(f"{attack} (max_iter {max_iter}): batched {m} examples in {wall:.2f} s wall / {cpu:.2f} s CPU "
                  f"({rate:.1f} attacks/s, {ok.mean():.0%} flipped); one at a time {k} examples in {wall1:.2f} s "
                  f"wall / {cpu1:.2f} s CPU ({rate1:.2f} attacks/s); batched = {rate / rate1:.1f}x")
    print(f"torch {torch.__version__}, 1 intra-op thread")


if __name__ == "__main__":
    main()
