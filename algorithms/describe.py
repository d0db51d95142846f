"""`describe`: a dataset's description measured as a run (non-private: it releases nothing, draws no noise and
spends no budget). The papers state their data's sizes (rows, rows per group and per class, attribute and feature
counts); a describe run loads the card (or recipe) exactly as every other run does (`runner.prepare`: the card's
files, filters and `n` subsample, the run's split) and reports those sizes as metrics, so a published size is
compared with a run record like every other published cell.

Metrics (the task kind `description`, which evaluate.py measures with `Describe.describe` below; `metrics_for`
adds `n_train`, `n_test` and `d`, the classifier view's width after encoding):
- `n_rows`: the rows as loaded, every split together (a graph card: its vertices);
- `n_rows_s0`, `n_rows_s1`: the rows of each group of the binary sensitive attribute (s = 1: the card's
  `privileged` value), where the card has one;
- `n_rows_class<k>`: the rows of each label value k (0 / 1 for a binary label, 0..9 for MNIST's digits), where
  the label has at most `max_classes` values;
- `n_train_s<g>`, `n_train_class<k>`: the same counts on the run's training rows (for a card with a predefined
  split, e.g. MNIST, the source's training set);
- `n_columns`: the attributes of the discrete view, label and sensitive attribute included; `n_attributes`: the
  same without the label (where the card has a discrete view);
- `n_inputs`: the source attributes the classifier view encodes (its columns before one-hot encoding; the
  sensitive attribute is never among them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from privfair_cli.registry import Plugin, register
from privfair_cli.typed import bounds


@dataclass(frozen=True)
class DescribeConfig:
    max_classes: int = field(metadata=bounds(ge=2))  # a label with more values is not counted value by value


@register
class Describe(Plugin):
    """`describe`: the sizes of the dataset as a run loads it (rows, rows per group and class, attribute and feature
    counts); fits nothing."""

    name = "describe"
    kind = "description"
    private = False
    guarantee = "none"
    Config = DescribeConfig

    def fit(self, data, budget, ledger, rng, device="cpu"):
        return self

    def describe(self, train, test) -> dict[str, float]:
        """The description metrics (module docstring)."""
        return description(self, train, test)


def _rows(train, test) -> list:
    """The parts that hold every row once: the run's training and test rows (one table where they are the same,
    e.g. a graph card or data.test_size=0)."""
    if test is train:
        return [train]
    ids = [part.meta.get("row_id") for part in (train, test)]
    if all(i is not None for i in ids) and np.intersect1d(ids[0], ids[1]).size:
        return [train]  # the test rows are training rows too: count them once
    return [train, test]


def counts(prefix: str, parts: list, max_classes: int) -> dict[str, float]:
    """`<prefix>` (rows), `<prefix>_s<g>` per sensitive group, `<prefix>_class<k>` per label value."""
    out = {prefix: float(sum(len(p) for p in parts))}
    if all(p.s is not None for p in parts):
        s = np.concatenate([np.asarray(p.s).astype(int) for p in parts])
        out |= {f"{prefix}_s{g}": float(np.sum(s == g)) for g in (0, 1)}
    y = np.concatenate([np.asarray(p.y).ravel() for p in parts]) if parts else np.zeros(0)
    values = np.unique(y[y >= 0]) if y.size else y
    if 0 < len(values) <= max_classes and np.all(np.mod(values, 1) == 0):
        out |= {f"{prefix}_class{int(k)}": float(np.sum(y == k)) for k in values}
    return out


def description(plugin, train, test, rng: np.random.Generator | None = None) -> dict[str, float]:
    """The description metrics of a `describe` run (module docstring): counts over every row and over the
    training rows, the discrete view's attribute counts and the classifier view's source attributes."""
    cap = plugin.cfg.max_classes
    out = counts("n_rows", _rows(train, test), cap)
    out |= {k.replace("n_rows", "n_train", 1): v for k, v in counts("n_rows", [train], cap).items() if k != "n_rows"}
    if train.frame is not None and len(train.frame.columns):
        columns, label = list(train.frame.columns), train.meta.get("label_column")
        out["n_columns"] = float(len(columns))
        if label is not None:
            out["n_attributes"] = float(len(columns) - (label in columns))
    if train.feature_names:
        out["n_inputs"] = float(len({name.split("=", 1)[0] for name in train.feature_names}))
    return out
