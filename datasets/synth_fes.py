"""`synth_fes`: the synthetic data of fair_sampling.md §6 (Zhang thesis 4.5.2.1), DA1 / DA2.

22,000 rows: y and a uniform and independent; x | y=1 ~ N([2, 2], [[5, 1], [1, 5]]), x | y=0 ~
N([-2, -2], [[10, 1], [1, 3]]). 2,000 random rows are the fair test set, the other 20,000 the pool. The
discriminatory data (DA) shrink G_PP (a = 1, y = 1) of the pool to `gpp_keep_ratio` x the mean size of the other
three groups (default DA1 0.25, DA2 0.15, §6 step 4: the ratios the printed test sets imply), or with
`mode: literal` to the seed's literal 2,000 / 3,000 rows. 2,000 random DA rows are the discriminatory test set.

`test_set: discriminatory` (Table 4.1) returns the DA with its 2,000 test rows marked (`row_is_test`);
`test_set: fair` (Table 4.2) returns the same DA training rows plus the fair test set as the test rows. The
labelled / unlabelled halves are drawn by the runner's split (`unlabelled_size: 0.5`). a = 1 is the protected
group, so the card's s (1 = privileged) is 1 - a. All draws come from the run's data stream.
"""

from __future__ import annotations

import numpy as np

from privfair_cli.errors import DataError

from . import Table

N_TOTAL, N_TEST = 22_000, 2_000
MEANS = {1: np.array([2.0, 2.0]), 0: np.array([-2.0, -2.0])}
COVS = {1: np.array([[5.0, 1.0], [1.0, 5.0]]), 0: np.array([[10.0, 1.0], [1.0, 3.0]])}
DEFAULT_RATIO = {"da1": 0.25, "da2": 0.15}
LITERAL_KEEP = {"da1": 2_000, "da2": 3_000}


def draw(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, a): n fair rows."""
    y = rng.integers(0, 2, n)
    a = rng.integers(0, 2, n)
    x = np.empty((n, 2))
    for label in (0, 1):
        m = y == label
        x[m] = rng.multivariate_normal(MEANS[label], COVS[label], size=int(m.sum()))
    return x, y, a


def shrink_gpp(y: np.ndarray, a: np.ndarray, keep: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of the pool with G_PP subsampled to `keep` rows (the other groups whole)."""
    gpp = np.flatnonzero((a == 1) & (y == 1))
    if not 0 < keep <= len(gpp):
        raise DataError(f"synth_fes: cannot keep {keep} of the {len(gpp)} G_PP rows")
    kept = rng.choice(gpp, size=keep, replace=False)
    return np.sort(np.concatenate([np.flatnonzero(~((a == 1) & (y == 1))), kept]))


# What a synthetic FES card provides (schema.card_views): a 0/1 label, features in [0, 1], a binary protected attribute.
VIEWS = ("label", "binary_label", "features", "numeric", "sensitive")


def generate(card, rng: np.random.Generator) -> Table:
    variant, mode, test_set = card.get("variant", "da1"), card.get("mode", "ratio"), card.get("test_set")
    if variant not in DEFAULT_RATIO or mode not in ("ratio", "literal") or test_set not in ("discriminatory", "fair"):
        raise DataError("synth_fes: variant must be da1|da2, mode ratio|literal, test_set discriminatory|fair "
                        f"(got {variant}, {mode}, {test_set})")
    x, y, a = draw(N_TOTAL, rng)
    perm = rng.permutation(N_TOTAL)
    fair_test, pool = perm[:N_TEST], perm[N_TEST:]
    other = [((a[pool] == g) & (y[pool] == lab)).sum() for g, lab in ((0, 1), (0, 0), (1, 0))]
    ratio = card.get("gpp_keep_ratio") or DEFAULT_RATIO[variant]
    keep = LITERAL_KEEP[variant] if mode == "literal" else int(round(ratio * np.mean(other)))
    da = pool[shrink_gpp(y[pool], a[pool], keep, rng)]
    da = rng.permutation(da)
    da_test, da_train = da[:N_TEST], da[N_TEST:]
    test = da_test if test_set == "discriminatory" else fair_test
    rows = np.concatenate([np.sort(da_train), np.sort(test)])
    is_test = np.arange(len(rows)) >= len(da_train)
    meta = {"row_is_test": is_test, "gpp_kept": keep}
    return Table(card["name"], x[rows], y[rows].astype(np.int64), (1 - a[rows]).astype(np.int64), ["x1", "x2"],
                 meta=meta)
