"""Seeds trained together. The runs of a sweep that differ only in their seed, of a plugin that can train several
seeds as one batched model (`Plugin.seed_batching`: the FairGAN and CFGAN families' stacked-parameter ensembles,
`algorithms/gan.py`), on a card whose data do not depend on the seed (a file-backed table, no sampled `n`,
`test_size: 0`), are run one after the other in one process (`sweep.run_inprocess`, so `privfair reproduce` and its
`--jobs`). The first of them trains every seed of the group as one model; each run then takes its own member,
evaluates and writes its own folder as any run does (resume, failure records and run identity are unchanged).

A member draws every random number from a generator of its own seed, so it computes what the solo run of its seed
computes except for the order of some float sums over the batch (reduction kernels split a (E, rows, ...) tensor
differently from a (1, rows, ...) one): about 1e-8 per step, which GAN training amplifies, so a batched seed's
numbers are an equally valid seeded run, not the solo run's numbers bit for bit. The same group gives the same
numbers again; the seeds a run was trained with are in its record (`env.seeds_batched`).

- `GROUP`: the run seeds of the group being run in this process (empty outside one); `group(seeds)` sets it.
- `train(key, seed, seeds, fit)`: the model holding `seed`'s member, the member's index, the seeds trained and the
  seconds to add to the caller's own wall time so that it reports its member's share of the group's training (the
  run that trained the group subtracts the others' shares, a run that takes the kept model adds its share, a run
  trained alone adds nothing): kept from an earlier run of the group with the same `key` (plugin, config, data), or
  trained now as `fit(seeds)`; a run whose data differ from the group's (another key) trains alone.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence

from privfair_cli.memo import Memo

GROUP: list[int] = []
_KEPT = Memo(1)  # "group" -> (key, seeds, model, seconds): the last trained group, one at a time


@contextlib.contextmanager
def group(seeds: Sequence[int]):
    GROUP[:] = [int(s) for s in seeds]
    try:
        yield
    finally:
        GROUP.clear()
        _KEPT.clear()


def train(key, seed: int, seeds: Sequence[int], fit: Callable[[list[int]], object]
          ) -> tuple[object, int, list[int], float]:
    """(model, index of `seed`'s member, the seeds it was trained with, the seconds that turn the caller's wall time
    into its member's share of the training)."""
    seeds = list(seeds)
    kept = _KEPT.get("group")
    if kept is not None and seed in kept[1]:
        if kept[0] == key:
            return kept[2], kept[1].index(seed), kept[1], kept[3] / len(kept[1])
        seeds = [seed]  # this run's data or config differ from the group's first run: it trains alone
    if seed not in seeds:
        seeds = [seed]
    t0 = time.perf_counter()
    model = fit(seeds)
    seconds = time.perf_counter() - t0
    if len(seeds) > 1:
        _KEPT["group"] = (key, seeds, model, seconds)
    return model, seeds.index(seed), seeds, seconds / len(seeds) - seconds
