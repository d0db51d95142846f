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


# ------------------------------------------------------------------------------------------ one run, f-DP
# The one-run game with a hypothesised trade-off curve f instead of (eps, delta) (the idea of Mahloujifar, Melis
# and Chaudhuri 2024, "Auditing f-differential privacy in one run"; the bound below is derived here, in the form
# of `fdp_tail`'s docstring). A mechanism is f-DP with respect to a canary when every test of "in" against "out"
# with false-positive rate x has power at most F(x) = 1 - f(x), for every value of the other canaries' bits.
# F is concave and nondecreasing; `gdp_power` and `profile_power` build it.


def gdp_power(mu: float):
    """F of mu-GDP (Dong, Roth and Su 2022): F(x) = Phi(Phi^-1(x) + mu), the power of the Gaussian shift test."""
    from scipy.special import ndtr, ndtri

    def power(x: float) -> float:
        return float(ndtr(ndtri(min(max(x, 0.0), 1.0)) + mu))
    return power


def profile_power(eps: np.ndarray, delta: np.ndarray):
    """F of a mechanism that is (eps_j, delta_j)-DP for every j of a privacy profile: every test of false-positive
    rate x has power <= e^eps_j x + delta_j, so F(x) = min(1, min_j e^eps_j x + delta_j). A coarser grid of eps or
    a pessimistic delta (dp-accounting's PLD) only raises F, which keeps `fdp_tail` an upper bound."""
    slope, icpt = np.exp(np.asarray(eps, dtype=float)), np.asarray(delta, dtype=float)

    def power(x: float) -> float:
        return float(min(1.0, np.min(slope * max(x, 0.0) + icpt)))
    return power


def fdp_tail(m: int, r: int, c: int, power) -> float:
    """An upper bound on P[C >= c], C the correct guesses among r (a fixed number) made on m canaries each in with
    probability 1/2, when the mechanism is f-DP with respect to each canary (F = `power`).

    Derivation. Fix a canary i and a level j; the test "guess i as the auditor does, but only where the other
    guesses have C_-i >= j right" depends on the output and the other canaries' bits, so f-DP (for each value
    of those bits, then averaged; F concave) bounds its right guesses by F of its wrong ones:
    P[i right, C_-i >= j] <= F(P[i wrong, C_-i >= j]). Summed over the m canaries (F concave again):
    E[C 1(C >= j+1)] <= m F(E[(r - C) 1(C >= j)] / m), since a right guess sees C_-i = C - 1 and a wrong one
    C_-i = C. With j = c - 1: c P[C >= c] <= m F((r - c + 1) P[C >= c-1] / m). Starting from P[C >= 0] = 1 this
    gives u_c >= P[C >= c] by induction (F nondecreasing). For F(x) = e^eps x it is the ratio of consecutive
    Binomial(r, e^eps / (1 + e^eps)) probabilities, the eps-DP analysis of Steinke, Nasr and Jagielski."""
    if c <= 0:
        return 1.0

    def first(j):  # the step from u = 1, decreasing in j
        return m / j * power((r - j + 1) / m)

    lo, hi = 1, c + 1  # u stays 1 below the first j whose step from 1 is below 1 (found by bisection)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if first(mid) >= 1.0 else (lo, mid)
    u = 1.0
    for j in range(lo, c + 1):
        u = min(u, m / j * power((r - j + 1) * u / m))
        if u <= 0.0:
            return 0.0
    return u


def fdp_largest_rejected(m: int, r: int, c: int, power_of, confidence: float, hi: float = 1.0,
                         cap: float = 1e3, iters: int = 40) -> float:
    """The largest theta whose trade-off curve (`power_of(theta)`, less private as theta grows) the c right guesses
    of r reject at level 1 - confidence: sup{theta : fdp_tail <= alpha}, by bisection; 0 where none is rejected.
    The mechanism is then, with confidence `confidence`, not `power_of(theta)`-DP for any theta below it."""
    alpha = 1 - confidence

    def rejected(theta):
        return fdp_tail(m, r, c, power_of(theta)) <= alpha

    lo = 0.0
    if not rejected(1e-9):
        return 0.0
    while rejected(hi):
        lo, hi = hi, hi * 2
        if hi > cap:
            return math.inf
    for _ in range(iters):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rejected(mid) else (lo, mid)
    return lo


def one_run_gdp_mu(m: int, r: int, c: int, confidence: float) -> float:
    """The one-run lower bound on mu: with confidence `confidence` the mechanism is not mu'-GDP for any mu' below
    it (c right guesses of r on m canaries). `gdp_eps` turns it into eps at a delta."""
    return fdp_largest_rejected(m, r, c, gdp_power, confidence)
