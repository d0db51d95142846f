"""The audit's lower bounds, pure: one-sided Clopper-Pearson bounds, the eps lower bound of one threshold test and
the distinguishing test that picks its threshold on half the releases and measures it on the other half
(Jagielski et al. 2020; Nasr et al. 2021), and the one-run test's p-value and eps (Steinke, Nasr and Jagielski
2023, Appendix D), and the parametric bound of Gaussian releases (`gdp_mu_lower`, `gdp_eps`). The formulas are
in the package docstring (privfair_cli.tools.audit)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

MAX_THRESHOLDS = 400


def cp_upper(k, n, a: float):
    """One-sided Clopper-Pearson upper bound at level a on a proportion with k successes in n."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):
        hi = stats.beta.ppf(1 - a, k + 1, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, hi)


def cp_lower(k, n, a: float):
    """One-sided Clopper-Pearson lower bound at level a."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):
        lo = stats.beta.ppf(a, np.maximum(k, 1e-300), n - k + 1)
    return np.where(k <= 0, 0.0, lo)


def eps_lower_bound(fp, n0, tp, n1, delta: float, alpha: float):
    """The eps lower bound of one test (package docstring): `fp` of `n0` releases on D and `tp` of `n1` on D' said
    "D'"; confidence 1 - alpha. Vectorised over arrays of counts."""
    fpr_hi, tpr_lo = cp_upper(fp, n0, alpha / 2), cp_lower(tp, n1, alpha / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        e1 = np.log(np.maximum(tpr_lo - delta, 0.0) / fpr_hi)
        e2 = np.log(np.maximum(1 - fpr_hi - delta, 0.0) / (1 - tpr_lo))
    e = np.fmax(np.fmax(np.nan_to_num(e1, nan=0.0, neginf=0.0), np.nan_to_num(e2, nan=0.0, neginf=0.0)), 0.0)
    return e


def _counts(neg: np.ndarray, pos: np.ndarray, thresholds: np.ndarray):
    """How many of `neg` and of `pos` lie strictly above each threshold (sorted search, no loop)."""
    neg_s, pos_s = np.sort(neg), np.sort(pos)
    fp = len(neg_s) - np.searchsorted(neg_s, thresholds, side="right")
    tp = len(pos_s) - np.searchsorted(pos_s, thresholds, side="right")
    return fp, tp


@dataclass
class Distinguished:
    eps_lb: float
    eps_hat: float  # point estimate of the chosen test on the measuring half (no confidence)
    threshold: float
    orientation: str  # "D' above" or "D above"
    fpr: float
    tpr: float
    fpr_hi: float
    tpr_lo: float
    n_select: int
    n_measure: int


def distinguish(out_d: np.ndarray, out_d1: np.ndarray, delta: float, confidence: float) -> Distinguished:
    """The distinguishing test on the statistics of the releases on D (`out_d`) and D' (`out_d1`): threshold
    chosen on the first half of each, bound measured on the second half."""
    out_d, out_d1 = np.asarray(out_d, dtype=float), np.asarray(out_d1, dtype=float)
    alpha = 1 - confidence
    h0, h1 = len(out_d) // 2, len(out_d1) // 2
    sel0, sel1, mea0, mea1 = out_d[:h0], out_d1[:h1], out_d[h0:], out_d1[h1:]
    cand = np.unique(np.concatenate([sel0, sel1]))
    if len(cand) > MAX_THRESHOLDS:
        cand = np.unique(np.quantile(cand, np.linspace(0, 1, MAX_THRESHOLDS)))
    best = (-1.0, 0.0, True)
    for d1_above in (True, False):
        neg, pos = (sel0, sel1) if d1_above else (sel1, sel0)
        fp, tp = _counts(neg, pos, cand)
        e = eps_lower_bound(fp, len(neg), tp, len(pos), delta, alpha)
        i = int(np.argmax(e))
        if e[i] > best[0]:
            best = (float(e[i]), float(cand[i]), d1_above)
    _, t, d1_above = best
    neg, pos = (mea0, mea1) if d1_above else (mea1, mea0)
    fp, tp = _counts(neg, pos, np.array([t]))
    fp, tp = int(fp[0]), int(tp[0])
    eps_lb = float(eps_lower_bound(fp, len(neg), tp, len(pos), delta, alpha))
    fpr, tpr = fp / len(neg), tp / len(pos)
    with np.errstate(divide="ignore"):
        hat = max(math.log(tpr / fpr) if fpr > 0 and tpr > 0 else (math.inf if tpr > 0 else 0.0),
                  math.log((1 - fpr) / (1 - tpr)) if tpr < 1 and fpr < 1 else (math.inf if fpr < 1 else 0.0), 0.0)
    return Distinguished(eps_lb, hat, t, "D' above" if d1_above else "D above", fpr, tpr,
                         float(cp_upper(fp, len(neg), alpha / 2)), float(cp_lower(tp, len(pos), alpha / 2)),
                         h0 + h1, len(mea0) + len(mea1))


def refutes(eps_lb: float, eps_claimed: float) -> bool:
    """Whether the lower bound exceeds the claim (beyond rounding)."""
    return eps_lb > eps_claimed * (1 + 1e-9)


def one_run_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Steinke, Nasr and Jagielski (2023), Appendix D: the probability of >= v correct guesses out of r when each
    of m canaries is included with probability 1/2 and the training is (eps, delta)-DP."""
    q = 1 / (1 + math.exp(-eps))
    beta_ = float(stats.binom.sf(v - 1, r, q))
    if delta == 0 or v == 0:
        return min(beta_, 1.0)
    # alpha = max_i P[v > Bin(r, q) >= v - i] / i over i = 1..v
    pmf = stats.binom.pmf(v - np.arange(1, v + 1), r, q)
    alpha_ = float(np.max(np.cumsum(pmf) / np.arange(1, v + 1)))
    return min(beta_ + alpha_ * delta * 2 * m, 1.0)


def one_run_eps(m: int, r: int, v: int, delta: float, confidence: float) -> float:
    """The largest eps rejected at level 1 - confidence (bisection; the p-value grows with eps)."""
    p = 1 - confidence
    if one_run_p_value(m, r, v, 0.0, delta) >= p:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(m, r, v, hi, delta) < p:
        lo, hi = hi, hi * 2
        if hi > 1e3:
            return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if one_run_p_value(m, r, v, mid, delta) < p else (lo, mid)
    return lo


def gdp_mu_lower(out_d, out_d1, confidence: float) -> float:
    """A lower confidence bound on mu of mu-GDP (Dong, Roth and Su 2022) from releases on D and D' whose law is
    Gaussian with one variance (checked for privfair's Gaussian releases by the white-box calibration check): the
    difference of the means less its one-sided normal margin at level alpha/2, over an upper chi-square bound on
    the pooled standard deviation at level alpha/2 (Nasr et al. 2023 audit Gaussian DP-SGD this way)."""
    a, b = np.asarray(out_d, dtype=float), np.asarray(out_d1, dtype=float)
    alpha = 1 - confidence
    n0, n1 = len(a), len(b)
    diff = abs(float(b.mean() - a.mean())) - stats.norm.ppf(1 - alpha / 2) * math.sqrt(a.var(ddof=1) / n0
                                                                                      + b.var(ddof=1) / n1)
    pooled = ((n0 - 1) * a.var(ddof=1) + (n1 - 1) * b.var(ddof=1)) / (n0 + n1 - 2)
    sigma_hi = math.sqrt(pooled * (n0 + n1 - 2) / stats.chi2.ppf(alpha / 2, n0 + n1 - 2))
    return max(diff, 0.0) / sigma_hi if sigma_hi > 0 else math.inf


def gdp_eps(mu: float, delta: float) -> float:
    """The smallest eps at which mu-GDP is (eps, delta)-DP: delta(eps) = Phi(-eps/mu + mu/2) - e^eps
    Phi(-eps/mu - mu/2) (Dong, Roth and Su 2022, Cor. 2.13), solved by bisection; 0 where mu = 0."""
    from privfair_cli.privacy.mechanisms import _analytic_delta

    if mu <= 0 or not 0 < delta < 1:
        return 0.0
    if _analytic_delta(1.0, mu, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while _analytic_delta(1.0, mu, hi) > delta:
        lo, hi = hi, hi * 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _analytic_delta(1.0, mu, mid) > delta else (lo, mid)
    return hi
