"""Group-stratified subsamples of another dataset card (Xu thesis §9.5.1.1: balanced Adult, unbalanced Dutch,
unbalanced MNIST).

A card using this loader names its `base_loader` (the loader of the card it inherits from) and
`sample_groups: {by: sensitive | label, sizes: {group value: rows}, scope: all | train}`: for every listed
group value, that many rows of the group are drawn without replacement from the base table (only among the
training rows when `scope: train`, the test rows then stay as they are); unlisted groups are kept whole.
The draw uses the run's data stream, so it is the same for every algorithm and eps at a given seed.
"""

from __future__ import annotations

import numpy as np

from privfair_cli import datasets
from privfair_cli.errors import ConfigError, DataError


def generate(card, rng: np.random.Generator) -> datasets.Table:
    if not card.get("base_loader") or not card.get("sample_groups"):
        raise ConfigError(f"data={card['name']}: the group_sample loader needs `base_loader` and `sample_groups`")
    table = datasets.load(dict(card, loader=card["base_loader"]), rng)
    spec = card["sample_groups"]
    by = spec.get("by", "sensitive")
    if by not in ("sensitive", "label"):
        raise ConfigError(f"data.sample_groups.by={by!r}; allowed: sensitive, label")
    groups = table.s if by == "sensitive" else table.y
    eligible = np.ones(len(table), bool)
    if spec.get("scope", "all") == "train":
        eligible = ~table.meta.get("row_is_test", np.zeros(len(table), bool))
    keep = np.ones(len(table), bool)
    for value, size in (spec.get("sizes") or {}).items():
        rows = np.flatnonzero(eligible & (groups == int(value)))
        if size > len(rows):
            raise DataError(f"data={card['name']}: group {by}={value} has {len(rows)} rows, {size} asked for")
        keep[rows] = False
        keep[rng.choice(rows, size=int(size), replace=False)] = True
    return table.subset(np.flatnonzero(keep))
