"""Metrics (foundations.md §4): group fairness of classifiers, marginal TVD of released data, graph recovery.

Per-group rates are computed once (`GroupRates`); every gap metric is derived from them, never re-derived by
hand. Conventions: S = 1 is the card's privileged group; gaps are signed `group 1 - group 0` (foundations F9)
and each also comes as `<name>_abs`. A rate with an empty denominator is NaN, not 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
import pandas as pd


def _rate(num: np.ndarray, den: np.ndarray) -> float:
    d = den.sum()
    return float((num & den).sum() / d) if d else float("nan")


@dataclass(frozen=True)
class GroupRates:
    """Positive rate, TPR, FPR, FDR and accuracy, overall and for s = 0 / s = 1."""

    y: np.ndarray
    yhat: np.ndarray
    s: np.ndarray | None

    def rates(self, mask: np.ndarray | None = None) -> dict[str, float]:
        y, yh = self.y.astype(bool), self.yhat.astype(bool)
        m = np.ones_like(y) if mask is None else mask.astype(bool)
        return {
            "positive_rate": _rate(yh, m),
            "tpr": _rate(yh, m & y),
            "fpr": _rate(yh, m & ~y),
            "fdr": _rate(~y, m & yh),
            "tnr": _rate(~yh, m & ~y),
            "accuracy": _rate(yh == y, m),
        }

    def by_group(self) -> dict[int, dict[str, float]]:
        return {g: self.rates(self.s == g) for g in (0, 1)}

    def difference(self, name: str) -> float:
        g = self.by_group()
        return g[1][name] - g[0][name]


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


def ber(y_s, s_hat) -> float:
    """Balanced error rate of a predictor of S (foundations §4, Feldman et al.)."""
    y_s, s_hat = np.asarray(y_s).astype(bool), np.asarray(s_hat).astype(bool)
    return 0.5 * (_rate(~s_hat, y_s) + _rate(s_hat, ~y_s))


# ---------------------------------------------------------------------------------------- released data
def marginal(frame: pd.DataFrame, cols: tuple[str, ...], domain: dict[str, int]) -> np.ndarray:
    """Normalised contingency table of `cols` (vectorised: one bincount over a mixed-radix index)."""
    shape = tuple(domain[c] for c in cols)
    idx = np.ravel_multi_index(tuple(frame[c].to_numpy() for c in cols), shape)
    counts = np.bincount(idx, minlength=int(np.prod(shape))).astype(float)
    return counts.reshape(shape) / max(len(frame), 1)


def tvd(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def tvd_kway(real: pd.DataFrame, synth: pd.DataFrame, domain: dict[str, int], k: int) -> float:
    """Average TVD over all k-way marginals of the attributes in `domain`."""
    cols = list(domain)
    return float(np.mean([tvd(marginal(real, c, domain), marginal(synth, c, domain))
                          for c in combinations(cols, k)]))


# ---------------------------------------------------------------------------------------- graphs
def _skeleton(adj) -> np.ndarray:
    a = np.asarray(adj).astype(bool)
    a = a | a.T
    np.fill_diagonal(a, False)
    return a


def graph_recovery(true_adj, learned_adj) -> dict[str, float]:
    """Skeleton recovery, edges undirected (privpc.md §1.5): TPR = TP/true edges, FPR = FP/true non-edges,
    TDR = TP/learned edges, FDR = 1 - TDR. SHD on skeletons counts missing plus extra edges."""
    t, l = _skeleton(true_adj), _skeleton(learned_adj)
    iu = np.triu_indices_from(t, k=1)
    t, l = t[iu], l[iu]
    tp, fp, fn = int((t & l).sum()), int((~t & l).sum()), int((t & ~l).sum())
    tdr = tp / (tp + fp) if tp + fp else float("nan")
    return {
        "edge_tpr": tp / t.sum() if t.sum() else float("nan"),
        "edge_fpr": fp / (~t).sum() if (~t).sum() else float("nan"),
        "edge_tdr": tdr,
        "edge_fdr": 1 - tdr if tp + fp else float("nan"),
        "shd": float(fp + fn),
    }
