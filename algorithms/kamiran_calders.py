"""Kamiran–Calders re-sampling (Kamiran & Calders, KAIS 33, 2012) and the fair re-sampling of FES, as shared
pre-processors: every function takes a binary group attribute `s`, binary labels `y` (and scores where needed)
and returns row indices into them, so any plugin (FES, fair-SSL, adversarial fairness) re-samples its own table
with `table.subset(idx)` or `X[idx]`. Not a plugin family: no plugin is registered here.

- `expected_sizes` (fair_sampling.md §3 step 3): E(s, y) = |{s}| |{y}| / n, the group sizes under independence
  of s and y; `reweighing_weights` = E / |G| (Kamiran & Calders' reweighing, AIF360's `Reweighing`).
- `uniform` ("US", §3): each (s, y) group re-sampled to round(E): drawn without replacement when it is too large,
  kept whole plus E - |G| draws with replacement when too small.
- `preferential` ("PS", §4): the same target sizes, but the rows removed or duplicated are the ones closest to a
  ranker's decision border (deprived negatives / favoured positives with the highest / lowest score removed,
  deprived positives / favoured negatives with the lowest / highest score duplicated, cycling the ranking when
  more copies are needed than rows exist).
- `balanced` (FES, §1 step 7): K re-sampled index sets in which the four (s, y) groups all have `size` rows
  (without replacement where a group has enough rows, else all of it plus draws with replacement), drawn for all
  K sets at once.

Loops run over the four (s, y) groups only, never over rows or over the K sets.
"""

from __future__ import annotations

import numpy as np

from privfair_cli.errors import DataError

GROUPS = ((0, 0), (0, 1), (1, 0), (1, 1))  # (s, y)


def _group_masks(s: np.ndarray, y: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    s, y = np.asarray(s).astype(int), np.asarray(y).astype(int)
    if s.shape != y.shape or not np.isin(s, (0, 1)).all() or not np.isin(y, (0, 1)).all():
        raise DataError("Kamiran-Calders sampling needs binary s and y of the same length")
    return {(a, b): (s == a) & (y == b) for a, b in GROUPS}


def expected_sizes(s: np.ndarray, y: np.ndarray) -> dict[tuple[int, int], float]:
    """E(s, y) = |{s}| |{y}| / n for each of the four groups (unrounded)."""
    s, y = np.asarray(s).astype(int), np.asarray(y).astype(int)
    n = len(y)
    return {(a, b): float((s == a).sum() * (y == b).sum() / n) for a, b in GROUPS}


def reweighing_weights(s: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-row reweighing weight E(s, y) / |G(s, y)| (Kamiran & Calders 2012, Alg. 3)."""
    masks = _group_masks(s, y)
    exp = expected_sizes(s, y)
    w = np.zeros(len(np.asarray(y)))
    for g, m in masks.items():
        if m.any():
            w[m] = exp[g] / m.sum()
    return w


def _target(s, y) -> dict[tuple[int, int], int]:
    return {g: int(np.floor(e + 0.5)) for g, e in expected_sizes(s, y).items()}


def uniform(s: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Row indices of the uniformly re-sampled table ("US"): every (s, y) group has round(E(s, y)) rows."""
    masks, target = _group_masks(s, y), _target(s, y)
    parts = []
    for g, m in masks.items():
        rows = np.flatnonzero(m)
        want = target[g]
        if want and not len(rows):
            raise DataError(f"Kamiran-Calders uniform sampling: group (s, y) = {g} is empty but expects {want} rows")
        if len(rows) >= want:
            parts.append(rng.choice(rows, size=want, replace=False))
        else:
            parts.append(np.concatenate([rows, rng.choice(rows, size=want - len(rows), replace=True)]))
    return np.sort(np.concatenate(parts))


def preferential(s: np.ndarray, y: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Row indices of the preferentially re-sampled table ("PS"), deterministic given the ranker's `score`
    (higher = more likely positive). Every group is changed border-first: negatives at their highest scores,
    positives at their lowest. With the deprived group d (lower positive rate), DN and FP are the groups above their
    expected size (the border rows are dropped), DP and FN the ones below it (the border rows are duplicated)."""
    masks, target = _group_masks(s, y), _target(s, y)
    score = np.asarray(score, dtype=float)
    parts = []
    for (a, b), m in masks.items():
        rows = np.flatnonzero(m)
        # border-first order: negatives with the highest score, positives with the lowest score come first
        order = rows[np.argsort(-score[rows] if b == 0 else score[rows], kind="stable")]
        want = target[(a, b)]
        if want and not len(rows):
            raise DataError(f"Kamiran-Calders preferential sampling: group (s, y) = {(a, b)} is empty")
        if len(rows) >= want:  # drop the len - want border rows, keep the rest
            parts.append(order[len(rows) - want:])
        else:  # keep all, duplicate the border rows first, cycling through the ranking
            parts.append(np.concatenate([rows, order[np.arange(want - len(rows)) % len(rows)]]))
    return np.sort(np.concatenate(parts))


def balanced(s: np.ndarray, y: np.ndarray, size: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """(k, 4 size) row indices: k re-sampled sets, each with exactly `size` rows of every (s, y) group (FES,
    Algorithm 4). A group with at least `size` rows is drawn without replacement; a smaller one is taken whole
    plus `size - |G|` rows drawn with replacement."""
    if size < 1 or k < 1:
        raise DataError(f"balanced sampling needs size >= 1 and k >= 1 (got size={size}, k={k})")
    parts = []
    for g, m in _group_masks(s, y).items():
        rows = np.flatnonzero(m)
        if not len(rows):
            raise DataError(f"FES re-sampling: group (s, y) = {g} is empty; no balanced set can be drawn")
        if len(rows) >= size:  # k independent permutations' first `size` entries, all at once
            pick = np.argpartition(rng.random((k, len(rows))), size - 1, axis=1)[:, :size]
            parts.append(rows[pick])
        else:
            extra = rng.integers(0, len(rows), size=(k, size - len(rows)))
            parts.append(np.concatenate([np.broadcast_to(rows, (k, len(rows))), rows[extra]], axis=1))
    return np.concatenate(parts, axis=1)
