"""Metrics (foundations.md §4): group fairness of classifiers, quality of released data (contingency counts, TVD,
Cramér's V; prefair.md §9), graph recovery.

Per-group rates are computed once (`GroupRates`); every gap metric is derived from them, never re-derived by
hand. Conventions: S = 1 is the card's privileged group; gaps are signed `group 1 - group 0` (foundations F9)
and each also comes as `<name>_abs`. A rate with an empty denominator is NaN, not 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd


def _rate(num: np.ndarray, den: np.ndarray) -> float:
    d = den.sum()
    return float((num & den).sum() / d) if d else float("nan")


# Each rate as (numerator event, denominator event) of the true labels y and predictions yhat (booleans):
# rate = |num & den| / |den|.
RATES = {
    "positive_rate": (lambda y, yh: yh, lambda y, yh: np.ones_like(y)),
    "tpr": (lambda y, yh: yh, lambda y, yh: y),
    "fpr": (lambda y, yh: yh, lambda y, yh: ~y),
    "fdr": (lambda y, yh: ~y, lambda y, yh: yh),
    "tnr": (lambda y, yh: ~yh, lambda y, yh: ~y),
    "accuracy": (lambda y, yh: yh == y, lambda y, yh: np.ones_like(y)),
}


@dataclass(frozen=True)
class GroupRates:
    """Positive rate, TPR, FPR, FDR, TNR and accuracy, overall, for each group s = 0 .. groups - 1 (two by default;
    e.g. the ten classes of MNIST), and within strata. The rates read binary labels; accuracy compares the labels
    as given, so it also holds for multiclass labels."""

    y: np.ndarray
    yhat: np.ndarray
    s: np.ndarray | None
    groups: int = 2

    def _events(self):
        return self.y.astype(bool), self.yhat.astype(bool)

    def rates(self, mask: np.ndarray | None = None) -> dict[str, float]:
        y, yh = self._events()
        m = np.ones_like(y) if mask is None else mask.astype(bool)
        out = {name: _rate(num(y, yh), m & den(y, yh)) for name, (num, den) in RATES.items()}
        return out | {"accuracy": _rate(np.asarray(self.y) == np.asarray(self.yhat), m)}  # multiclass labels too

    def by_group(self) -> dict[int, dict[str, float]]:
        return {g: self.rates(self.s == g) for g in range(self.groups)}

    def difference(self, name: str) -> float:
        g = self.by_group()
        return g[1][name] - g[0][name]

    def by_stratum(self, strata: np.ndarray, names: tuple[str, ...]) -> dict[int, dict[str, np.ndarray]]:
        """For s = 0 / 1: each rate in `names` inside every stratum (codes 0..k-1, e.g. the groups of admissible
        values), NaN where its denominator is empty; one bincount per rate."""
        y, yh = self._events()
        strata = np.asarray(strata)
        k = int(strata.max()) + 1 if strata.size else 0
        out = {}
        for g in (0, 1):
            m = self.s == g
            out[g] = {}
            for name in names:
                num, den = RATES[name]
                d = m & den(y, yh)
                dd = np.bincount(strata[d], minlength=k)
                nn = np.bincount(strata[d & num(y, yh)], minlength=k)
                out[g][name] = np.where(dd > 0, nn / np.maximum(dd, 1), np.nan)
        return out


def classification(y, yhat, s=None) -> dict[str, float]:
    """accuracy, risk_difference (+_abs), dtpr, dfpr (+_abs), per-group tpr/fpr/fdr/accuracy,
    equalized_odds_gap = max(|dtpr|, |dfpr|) (fairlearn's definition), balanced_error_rate."""
    y, yhat = np.asarray(y).astype(int), np.asarray(yhat).astype(int)
    gr = GroupRates(y, yhat, None if s is None else np.asarray(s).astype(int))
    overall = gr.rates()
    out = {
        "accuracy": overall["accuracy"],
        "balanced_error_rate": 1 - (overall["tpr"] + overall["tnr"]) / 2,
        "positive_rate": overall["positive_rate"],
    }
    if s is None:
        return out
    groups = gr.by_group()
    for name, metric in (("risk_difference", "positive_rate"), ("dtpr", "tpr"), ("dfpr", "fpr"),
                         ("dfdr", "fdr")):
        out[name] = groups[1][metric] - groups[0][metric]
        out[f"{name}_abs"] = abs(out[name])
    out["equalized_odds_gap"] = max(out["dtpr_abs"], out["dfpr_abs"])
    for g, rates in groups.items():
        for metric in ("accuracy", "tpr", "fpr", "fdr"):
            out[f"{metric}_s{g}"] = rates[metric]
    return out


# ---------------------------------------------------------------------------------------- k groups, intervals
GROUP_RATES = ("positive_rate", "tpr", "fpr", "fdr", "accuracy")  # positive_rate: the selection rate
INTERVAL_RATES = ("accuracy", "tpr")  # the per-group rates that also get an interval (the by-group plot's)
BINARY_GAPS = (("risk_difference", "positive_rate"), ("dtpr", "tpr"), ("dfpr", "fpr"), ("dfdr", "fdr"))
BOOTSTRAP_RESAMPLES = 1000  # resamples of the test rows behind every interval (0: no intervals)
BOOTSTRAP_LEVEL = 0.95  # percentile intervals: the 2.5 % and 97.5 % quantiles of the resampled statistic
BOOTSTRAP_SEED = 50  # fixed: the run's streams are left untouched, so no other metric moves
CI = ("_ci_low", "_ci_high")


def ci_names(metric: str) -> tuple[str, str]:
    """The names of a metric's interval bounds: `accuracy_ci_low`, `tpr_gap_ci_high[race]`."""
    base, bracket, rest = metric.partition("[")
    return f"{base}{CI[0]}{bracket}{rest}", f"{base}{CI[1]}{bracket}{rest}"


@dataclass(frozen=True)
class Groups:
    """The groups of a sensitive attribute on some rows: `attribute` (`race`, or `sex&race` for an intersection),
    one label per group (`race=White`, `sex=Male&race=White`), each row's group `codes` (0..k-1) and the
    `reference` group."""

    attribute: str
    labels: tuple[str, ...]
    codes: np.ndarray
    reference: int


def _tally_rates(T: np.ndarray) -> np.ndarray:
    """GROUP_RATES from tallies (..., 5) = (rows, predicted positive, positive, true positive, correct); NaN where
    a denominator is 0."""
    n, pp, pos, tp, cor = np.moveaxis(T, -1, 0)
    num = np.stack([pp, tp, pp - tp, pp - tp, cor], -1)
    den = np.stack([n, pos, n - pos, pp, n], -1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def _percentiles(x: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Per column of x (resamples x statistics), the two-sided `level` percentile interval over the resamples where
    the statistic is defined (numpy's linear quantiles); NaN where it is undefined in more than half of them."""
    x = np.sort(x.T, axis=1)  # NaN last
    defined = x.shape[1] - np.isnan(x).sum(1)
    rows = np.arange(len(x))
    bounds = []
    for q in ((1 - level) / 2, (1 + level) / 2):
        pos = q * np.maximum(defined - 1, 0)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, np.maximum(defined - 1, 0))
        a, b = x[rows, lo], x[rows, hi]
        bounds.append(np.where(2 * defined > x.shape[1], a + (pos - lo) * (b - a), np.nan))
    return bounds[0], bounds[1]


def group_metrics(y, yhat, groups: Groups | None, s=None, resamples: int | None = None,
                  seed: int = BOOTSTRAP_SEED) -> dict[str, float]:
    """Rates for every group, the gaps between them, and 95 % bootstrap intervals (docs/groups.md).

    With `groups` (label L, attribute A): `n_test[L]`, each GROUP_RATES rate `<rate>[L]`, `reference[L] = 1` for
    the reference group, `<rate>_gap[A]` = max - min over the groups where the rate is defined (NaN below two) and
    `<rate>_vs_ref[L]` = rate(L) - rate(reference) for every other group. With `s`: the intervals of the binary
    metrics of `classification` (their values are its own). Intervals (`ci_names`) for `accuracy`, each gap and
    each per-group accuracy and TPR: percentile intervals of `resamples` (BOOTSTRAP_RESAMPLES) resamples of the
    rows with replacement, seeded with `seed`. Every statistic reads only the counts of the rows' cells (group, s,
    label, prediction, correct), so a resample is drawn as multinomial counts of those cells (exactly the counts
    of n rows drawn with replacement), all resamples in one call, and every statistic is a matrix product of the
    counts: no loop over resamples or rows."""
    resamples = BOOTSTRAP_RESAMPLES if resamples is None else resamples
    y, yhat = np.asarray(y), np.asarray(yhat)
    k = len(groups.labels) if groups is not None else 1
    g = np.asarray(groups.codes, dtype=np.int64) if groups is not None else np.zeros(len(y), np.int64)
    sv = np.zeros(len(y), np.int64) if s is None else np.asarray(s).astype(np.int64)
    cell = (((g * 2 + sv) * 2 + (y != 0)) * 2 + (yhat != 0)) * 2 + (y == yhat)
    counts = np.bincount(cell, minlength=16 * k)
    idx = np.flatnonzero(counts)
    bits = (idx[:, None] >> np.arange(3, -1, -1)) & 1  # s, label, prediction, correct (the group: idx >> 4)
    tally = np.column_stack([np.ones(len(idx)), bits[:, 2], bits[:, 1], bits[:, 1] & bits[:, 2], bits[:, 3]])
    A = np.zeros((len(idx), k + 2, 5))  # each cell's tallies, added to its group's and to its s-group's
    A[np.arange(len(idx)), idx >> 4] = tally
    A[np.arange(len(idx)), k + bits[:, 0]] = tally
    N = counts[idx][None, :].astype(float)
    if resamples:
        draws = np.random.default_rng(seed).multinomial(len(y), counts[idx] / len(y), size=resamples)
        N = np.vstack([N, draws])
    T = (N @ A.reshape(len(idx), -1)).reshape(len(N), k + 2, 5)
    R = _tally_rates(T)  # resamples (row 0: the rows themselves) x (k groups, s = 0, s = 1) x GROUP_RATES
    blocks: list[tuple[np.ndarray, list[str], bool, list[bool]]] = []  # (columns, names, value?, interval?)
    blocks.append((_tally_rates(T[:, :k].sum(1))[:, 4:], ["accuracy"], False, [True]))
    point = {}
    if groups is not None:
        labels, ref, r = groups.labels, groups.reference, R[:, :k]
        point |= {f"n_test[{label}]": float(T[0, i, 0]) for i, label in enumerate(labels)}
        point[f"reference[{labels[ref]}]"] = 1.0
        blocks.append((r.reshape(len(N), -1), [f"{rate}[{label}]" for label in labels for rate in GROUP_RATES], True,
                       [rate in INTERVAL_RATES for _ in labels for rate in GROUP_RATES]))
        spread = np.fmax.reduce(r, 1) - np.fmin.reduce(r, 1)
        blocks.append((np.where((~np.isnan(r)).sum(1) >= 2, spread, np.nan),
                       [f"{rate}_gap[{groups.attribute}]" for rate in GROUP_RATES], True, [True] * 5))
        others = [i for i in range(k) if i != ref]
        blocks.append(((r[:, others] - r[:, [ref]]).reshape(len(N), -1),
                       [f"{rate}_vs_ref[{labels[i]}]" for i in others for rate in GROUP_RATES], True,
                       [True] * 5 * len(others)))
    if s is not None:
        diff = R[:, k + 1, :4] - R[:, k, :4]  # s = 1 minus s = 0: positive_rate, tpr, fpr, fdr
        names = [name for name, _ in BINARY_GAPS]
        blocks.append((np.column_stack([diff, np.abs(diff), np.fmax(np.abs(diff[:, 1]), np.abs(diff[:, 2])),
                                        R[:, k, 4], R[:, k + 1, 4]]),
                       names + [f"{name}_abs" for name in names] + ["equalized_odds_gap", "accuracy_s0",
                                                                     "accuracy_s1"], False, [True] * 11))
    X = np.concatenate([b[0] for b in blocks], axis=1)
    names = [name for b in blocks for name in b[1]]
    valued = [b[2] for b in blocks for _ in b[1]]
    ci = np.flatnonzero([c for b in blocks for c in b[3]])
    point |= {name: float(x) for name, x, v in zip(names, X[0], valued, strict=True) if v}
    if resamples:
        low, high = _percentiles(X[1:, ci], BOOTSTRAP_LEVEL)
        for i, lo, hi in zip(ci, low, high, strict=True):
            a, b = ci_names(names[i])
            point[a], point[b] = float(lo), float(hi)
    return point


GROUP_NAMES = {(1, 1): "G_PP", (0, 1): "G_UP", (1, 0): "G_PN", (0, 0): "G_UN"}  # (z, label) -> name


def group_counts(z, labels) -> dict[str, int]:
    """The four group sizes of fair_sampling.md §0 (Eqs. 4.7-4.10): G_PP = |{z=1, label=1}|, G_UP = |{z=0,
    label=1}|, G_PN = |{z=1, label=0}|, G_UN = |{z=0, label=0}|, with z = 1 the protected group and `labels` the
    true, pseudo or predicted labels."""
    counts = contingency(np.column_stack([np.asarray(z).astype(int), np.asarray(labels).astype(int)]), (2, 2))
    return {name: int(counts[a, b]) for (a, b), name in GROUP_NAMES.items()}


def label_noise(y, y_pseudo, z) -> dict[str, float]:
    """Pseudo-label noise per group (fair_sampling.md §0, Eqs. 4.18-4.22): N_{g,p} = P(yp=1 | y=0, z=g) +
    P(yp=0 | y=1, z=g) = FPR + 1 - TPR within group g, from GroupRates; `noise_gap` = |N_1 - N_0|."""
    groups = GroupRates(np.asarray(y).astype(int), np.asarray(y_pseudo).astype(int),
                        np.asarray(z).astype(int)).by_group()
    noise = {g: r["fpr"] + 1 - r["tpr"] for g, r in groups.items()}
    return {"noise_protected": noise[1], "noise_unprotected": noise[0], "noise_gap": abs(noise[1] - noise[0])}


def ber(y_s, s_hat) -> float:
    """Balanced error rate of a predictor of S (foundations §4, Feldman et al.)."""
    y_s, s_hat = np.asarray(y_s).astype(bool), np.asarray(s_hat).astype(bool)
    return 0.5 * (_rate(~s_hat, y_s) + _rate(s_hat, ~y_s))


def _defined_mean(x: np.ndarray) -> float:
    ok = ~np.isnan(x)
    return float(x[ok].mean()) if ok.any() else float("nan")


CONDITIONAL = (("cdp", "positive_rate"), ("ctprb", "tpr"), ("ctnrb", "tnr"))


def conditional_gaps(yhat, y, s, groups) -> dict[str, float]:
    """PreFair's conditional gaps CDP, CTPRB, CTNRB (prefair.md §9 item 5) over the groups of admissible tuples:
    `<gap>` = |mean over groups of the S=1 rates - mean over groups of the S=0 rates| (each mean over the groups
    where that rate is defined; the reference code's variant, A14); `<gap>_weighted` =
    |sum_a P(A=a) (rate(1, a) - rate(0, a))| over groups where both are defined (the seed's E_A)."""
    g = np.asarray(groups)
    weight = np.bincount(g, minlength=int(g.max()) + 1) / len(g)
    rates = GroupRates(np.asarray(y), np.asarray(yhat), np.asarray(s).astype(int)).by_stratum(
        g, tuple(rate for _, rate in CONDITIONAL))
    out = {}
    for gap, rate in CONDITIONAL:
        r1, r0 = rates[1][rate], rates[0][rate]
        both = ~np.isnan(r0) & ~np.isnan(r1)
        out[gap] = abs(_defined_mean(r1) - _defined_mean(r0))
        out[f"{gap}_weighted"] = abs(float(np.sum(weight[both] * (r1[both] - r0[both]))))
    return out


def fairness_gaps(yhat, y, s, groups) -> dict[str, float]:
    """prefair.md §9 item 5: |DP|, |TPRB|, |TNRB|, accuracy parity and the conditional gaps between s = 1 and
    s = 0 (`groups`: the admissible group of each row)."""
    rates = GroupRates(np.asarray(y), np.asarray(yhat), np.asarray(s).astype(int))
    return {"dp": abs(rates.difference("positive_rate")), "tprb": abs(rates.difference("tpr")),
            "tnrb": abs(rates.difference("tnr")), "accuracy_parity": abs(rates.difference("accuracy"))
            } | conditional_gaps(yhat, y, s, groups)


# ---------------------------------------------------------------------------------------- released data
# A13: the PreFair reference code divides its mean |V_real - V_syn| by 2; `acd_ref_code` keeps that factor so that it
# compares with the published Table 3 / Figure 7(c) numbers.
REF_CODE_ACD_DIVISOR = 2


def contingency(codes: np.ndarray, shape: tuple[int, ...], weights=None, dtype=float) -> np.ndarray:
    """Counts (with `weights`: summed weights) of every cell of the table of `codes` (n x k integer codes, column j
    in 0..shape[j]-1), as an array of `shape` and `dtype`: one bincount over the mixed-radix index (the first column
    most significant, as `np.ravel_multi_index`, which took 7x longer than Horner's rule on 300k rows); k = 0 gives
    the one-cell total. A code outside its column's range is a ValueError. The one place privfair counts rows per
    cell of a joint domain."""
    codes, shape = np.asarray(codes), tuple(int(c) for c in shape)
    idx = np.zeros(len(codes), np.intp)
    for j, size in enumerate(shape):
        col = codes[:, j]
        if len(col) and (col.min() < 0 or col.max() >= size):
            raise ValueError(f"contingency: column {j} holds codes outside 0..{size - 1}")
        if j:
            idx *= size
            idx += col
        else:
            idx = col.astype(np.intp)
    cells = int(np.prod(shape, dtype=np.float64))
    return np.bincount(idx, weights, minlength=cells).astype(dtype, copy=False).reshape(shape)


def marginal(frame: pd.DataFrame, cols: tuple[str, ...], domain: dict[str, int]) -> np.ndarray:
    """Normalised contingency table of `cols`."""
    counts = contingency(frame[list(cols)].to_numpy(), tuple(domain[c] for c in cols))
    return counts / max(len(frame), 1)


def tvd(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def marginal_pairs(real: pd.DataFrame, synth: pd.DataFrame, domain: dict[str, int], k: int,
                   max_cells: int | None = None):
    """(attributes, real counts, synthetic counts) for every k-way marginal of the attributes in `domain` (those
    the synthetic table has) with at most `max_cells` cells (None: all)."""
    cols = [c for c in domain if c in synth.columns]
    for c in combinations(cols, k):
        shape = tuple(domain[x] for x in c)
        if max_cells is None or int(np.prod(shape)) <= max_cells:
            yield c, contingency(real[list(c)].to_numpy(), shape), contingency(synth[list(c)].to_numpy(), shape)


def mean_tvd(pairs) -> float:
    """Average TVD over (attributes, real counts, synthetic counts) marginals, each normalised to sum 1."""
    return float(np.mean([tvd(a / max(a.sum(), 1), b / max(b.sum(), 1)) for _, a, b in pairs]))


def tvd_kway(real: pd.DataFrame, synth: pd.DataFrame, domain: dict[str, int], k: int,
             max_cells: int | None = None) -> float:
    """Average TVD over the k-way marginals (with at most `max_cells` cells) of the attributes in `domain`."""
    return mean_tvd(marginal_pairs(real, synth, domain, k, max_cells))


def bergsma_v(table: np.ndarray) -> float:
    """Bias-corrected Cramér's V (Bergsma 2013) of a contingency table; empty rows/columns are dropped."""
    t = np.asarray(table, dtype=float)
    t = t[t.sum(axis=1) > 0][:, t.sum(axis=0) > 0]
    r, c = t.shape
    n = t.sum()
    if r < 2 or c < 2 or n < 2:
        return 0.0
    e = np.outer(t.sum(axis=1), t.sum(axis=0)) / n
    phi2 = ((t - e) ** 2 / e).sum() / n
    phi2c = max(0.0, phi2 - (r - 1) * (c - 1) / (n - 1))
    rc, cc = r - (r - 1) ** 2 / (n - 1), c - (c - 1) ** 2 / (n - 1)
    den = min(rc - 1, cc - 1)
    return float(math.sqrt(phi2c / den)) if den > 0 else 0.0


def ref_code_v(table: np.ndarray) -> float:
    """The PreFair reference code's Cramér's V (prefair.md A13): the n x 2 matrix of the rows' raw codes (zeros
    replaced by 1) is treated as a contingency table, with the bias correction for r = c = 2. Computed from the
    pair's count table: row (u, v) of that matrix occurs n_uv times."""
    t = np.asarray(table, dtype=float)
    u = np.maximum(np.arange(t.shape[0]), 1)[:, None] * np.ones_like(t)
    v = np.maximum(np.arange(t.shape[1]), 1)[None, :] * np.ones_like(t)
    c1, c2 = (t * u).sum(), (t * v).sum()
    n = c1 + c2
    r = u + v
    e1, e2 = r * c1 / n, r * c2 / n
    phi2 = (t * ((u - e1) ** 2 / e1 + (v - e2) ** 2 / e2)).sum() / n
    phi2c = max(0.0, phi2 - 1 / (n - 1))
    return float(math.sqrt(phi2c / (1 - 1 / (n - 1))))


MARGINAL_MAX_CELLS = 10_000  # default cap on a marginal's cells for TVD / ACD (the PreFair reference code's)


def release_metrics(real: pd.DataFrame, synth: pd.DataFrame, domain: dict[str, int],
                    max_cells: int | None = MARGINAL_MAX_CELLS) -> dict[str, float]:
    """Quality of a released table against the real one (prefair.md §9 items 1-3): `tvd_1way`, `tvd_2way` (mean TVD
    over the marginals with at most `max_cells` cells), `acd` (mean |V_real - V_syn| of Bergsma's corrected
    Cramér's V over the 2-way marginals) and `acd_ref_code` (the reference code's variant, A13)."""
    pairs = list(marginal_pairs(real, synth, domain, 2, max_cells))
    acd = [abs(bergsma_v(a) - bergsma_v(b)) for _, a, b in pairs]
    acd_ref = [abs(ref_code_v(a) - ref_code_v(b)) for _, a, b in pairs]
    return {"tvd_1way": tvd_kway(real, synth, domain, 1, max_cells), "tvd_2way": mean_tvd(pairs),
            "acd": float(np.mean(acd)), "acd_ref_code": float(np.mean(acd_ref)) / REF_CODE_ACD_DIVISOR}


# ---------------------------------------------------------------------------------------- graphs
def _skeleton_edges(adj) -> np.ndarray:
    """The undirected edges of a graph (p x p, any nonzero entry is an edge, directions ignored) as a boolean
    vector over the pairs i < j."""
    a = np.asarray(adj) != 0
    a = a | a.T
    return a[np.triu_indices_from(a, k=1)]


def skeleton_rates(est, true, undefined: str = "pcalg") -> dict[str, float]:
    """pcalg `compareGraphs(gl = est, gt = true)` on skeletons (privpc.md §1.5): tpr = shared / true edges,
    fpr = false edges / true gaps, tdr = shared / estimated edges, fdr = 1 - tdr. Where a denominator is 0,
    `undefined="pcalg"` keeps pcalg's rules (tpr 0, fpr 1, tdr 1) and `"nan"` gives NaN."""
    e, t = _skeleton_edges(est), _skeleton_edges(true)
    shared, n_true, n_est, gaps = int((t & e).sum()), int(t.sum()), int(e.sum()), int((~t).sum())
    nan = undefined == "nan"
    tpr = shared / n_true if n_true else (float("nan") if nan else 0.0)
    fpr = int((e & ~t).sum()) / gaps if gaps else (float("nan") if nan else 1.0)
    tdr = shared / n_est if n_est else (float("nan") if nan else 1.0)
    return {"tpr": tpr, "fpr": fpr, "tdr": tdr, "fdr": 1 - tdr}


def graph_recovery(true_adj, learned_adj) -> dict[str, float]:
    """Skeleton recovery, edges undirected (privpc.md §1.5), from one comparison in three readings:

    - `edge_tpr`, `edge_fpr`, `edge_tdr`, `edge_fdr` (textbook definitions, NaN where a rate is undefined) and
      `shd` (missing plus extra edges of the skeleton): the core metrics of every graph run;
    - `*_textbook`: the same rates with pcalg's edge-case rules (`compareGraphs(est, true)`);
    - `*_pub`: `compareGraphs(true, est)`, the graphs swapped, which is what the thesis' tables print
      (privpc.md §0.1): tpr_pub = precision, tdr_pub = recall, fpr_pub = missed true edges / gaps of the estimate;
    - `true_edges`, `num_edges`, `shared_edges`."""
    e, t = _skeleton_edges(learned_adj), _skeleton_edges(true_adj)
    counts = {"true_edges": int(t.sum()), "num_edges": int(e.sum()), "shared_edges": int((t & e).sum())}
    core = {f"edge_{k}": v for k, v in skeleton_rates(learned_adj, true_adj, "nan").items()}
    textbook = {f"{k}_textbook": v for k, v in skeleton_rates(learned_adj, true_adj).items()}
    published = {f"{k}_pub": v for k, v in skeleton_rates(true_adj, learned_adj).items()}
    return core | {"shd": float((e ^ t).sum())} | textbook | published | counts


def pmf_distance(a: np.ndarray, b: np.ndarray) -> float:
    """||P_a - P_b||_2 of the empirical row distributions of two tables with the same columns (fairgan.md §7:
    each distinct row is a cell; PMF = count / rows; the norm runs over the cells seen in either table)."""
    a, b = np.asarray(a), np.asarray(b)
    if not len(a) or not len(b):
        return float("nan")
    _, inverse = np.unique(np.vstack([a, b]), axis=0, return_inverse=True)
    inverse = inverse.ravel()
    k = int(inverse.max()) + 1
    pa = np.bincount(inverse[:len(a)], minlength=k) / len(a)
    pb = np.bincount(inverse[len(a):], minlength=k) / len(b)
    return float(np.linalg.norm(pa - pb))


def distinct_rows(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(M, axis=0, return_inverse=True)`, fast for small non-negative integer entries (one-hot or code
    tables): each row becomes one mixed-radix int64 key. Other tables take numpy's row sort."""
    M = np.asarray(M)
    if M.size and M.ndim == 2 and np.array_equal(M, np.rint(M)) and M.min() >= 0:
        radix = M.max(axis=0).astype(np.int64) + 1
        if np.sum(np.log2(radix.astype(float))) < 62:
            weights = np.concatenate([np.cumprod(radix[::-1])[::-1][1:], [1]])
            keys, first, inv = np.unique(M.astype(np.int64) @ weights, return_index=True, return_inverse=True)
            return M[first], inv.ravel()
    rows, inv = np.unique(M, axis=0, return_inverse=True)
    return rows, inv.ravel()


def lrd(real: np.ndarray, synthetic: np.ndarray, rng: np.random.Generator, folds: int = 3) -> float:
    """Logistic detection (SDMetrics `LogisticDetection`; ffpdg.md §7, F14): real rows labelled 1, synthetic rows 0,
    `folds`-fold stratified shuffled cross-validation of a logistic regression on the (one-hot) features;
    LRD = 1 - mean over folds of (2 max(AUC, 0.5) - 1). 1: indistinguishable, 0: perfectly separated."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import StratifiedKFold

    X = np.vstack([real, synthetic]).astype(float)
    y = np.concatenate([np.ones(len(real)), np.zeros(len(synthetic))])
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=int(rng.integers(2**31)))
    scores = []
    for tr, te in cv.split(X, y):
        # the same fit on the fold's distinct (row, label) pairs weighted by their counts (the objective is a sum
        # over rows): fast for the small discrete domains this is used on
        rows, inv = distinct_rows(np.column_stack([X[tr], y[tr]]))
        model = LogisticRegression(max_iter=1000).fit(rows[:, :-1], rows[:, -1],
                                                      sample_weight=np.bincount(inv.ravel(), minlength=len(rows)))
        test_rows, test_inv = distinct_rows(X[te])
        auc = roc_auc_score(y[te], model.predict_proba(test_rows)[:, 1][test_inv.ravel()])
        scores.append(2 * max(auc, 0.5) - 1)
    return float(1 - np.mean(scores))


def parity_gaps(y, yhat, s) -> dict[str, float]:
    """ffpdg.md §7: `dsp` = |P(yhat=1 | s=0) - P(yhat=1 | s=1)| and `deo` = |TPR(s=0) - TPR(s=1)| (equal
    opportunity, F20), from `GroupRates`."""
    gr = GroupRates(np.asarray(y).astype(int), np.asarray(yhat).astype(int), np.asarray(s).astype(int))
    return {"dsp": abs(gr.difference("positive_rate")), "deo": abs(gr.difference("tpr"))}
