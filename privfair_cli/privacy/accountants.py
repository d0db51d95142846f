"""Pure accounting formulas: conversions between pure DP, zCDP, RDP and (eps, delta)-DP, and the sizing of zCDP
releases (the Gaussian's sigma and the exponential mechanism's eps for a share of rho).

Bookkeeping lives in `ledger.py`; this module only holds functions that tests pin to reference values.
The zCDP <-> (eps, delta) conversions are those of Canonne, Kamath and Steinke (2020), the ones the
reference MST code uses (`cdp2adp.py`); the classic bound `rho + 2 sqrt(rho log(1/delta))` is offered beside.
Every conversion takes the noise-free limit (eps or rho = inf) and huge finite values (1e300) without overflow.
"""

from __future__ import annotations

import math

import numpy as np

DEFAULT_RDP_ORDERS = tuple(range(2, 257))


def bisect(above, lo: float, hi: float, max_iter: int = 1000) -> tuple[float, float]:
    """Bisection for the threshold of a monotone predicate: `above(x)` is False below it and True at and above it,
    with above(lo) False and above(hi) True. Halves [lo, hi] until the midpoint no longer moves (float fixed point)
    or `max_iter` halvings; returns the final (lo, hi): lo is the last point found below, hi the last above."""
    for _ in range(max_iter):
        mid = (lo + hi) / 2
        if above(mid):
            if mid == hi:
                break
            hi = mid
        else:
            if mid == lo:
                break
            lo = mid
    return lo, hi


def square(x: float) -> float:
    """x**2, or inf where it overflows (Python floats raise OverflowError instead)."""
    try:
        return x**2
    except OverflowError:
        return math.inf


def cdp_delta(rho: float, eps: float) -> float:
    """Smallest delta such that rho-zCDP implies (eps, delta)-DP (CKS 2020, Prop. 7)."""
    if rho < 0 or eps < 0:
        raise ValueError("rho and eps must be non-negative")
    if rho == 0 or math.isinf(eps):
        return 0.0
    if math.isinf(rho):
        return 1.0
    def above(alpha: float) -> bool:  # the derivative in alpha of the delta bound is >= 0
        return not (2 * alpha - 1) * rho - eps + math.log1p(-1.0 / alpha) < 0

    lo, hi = bisect(above, 1.01, (eps + 1) / (2 * rho) + 2)
    alpha = (lo + hi) / 2  # the last midpoint evaluated: at the fixed point it equals lo or hi
    log_term = (alpha - 1) * (alpha * rho - eps) + alpha * math.log1p(-1 / alpha)
    try:
        delta = math.exp(log_term) / (alpha - 1.0)
    except OverflowError:
        return 1.0
    return min(delta, 1.0)


def cdp_eps(rho: float, delta: float) -> float:
    """Smallest eps such that rho-zCDP implies (eps, delta)-DP (bisection on `cdp_delta`)."""
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1) to convert zCDP to (eps, delta)-DP")
    if rho == 0:
        return 0.0
    hi = zcdp_eps_classic(rho, delta)
    if math.isinf(hi):
        return math.inf
    return bisect(lambda eps: cdp_delta(rho, eps) <= delta, 0.0, hi)[1]


def cdp_rho(eps: float, delta: float) -> float:
    """Largest rho such that rho-zCDP implies (eps, delta)-DP (bisection on `cdp_delta`)."""
    if not eps > 0 or not 0 < delta < 1:
        raise ValueError("need eps > 0 and 0 < delta < 1")
    if math.isinf(eps):
        return math.inf
    return bisect(lambda rho: not cdp_delta(rho, eps) <= delta, 0.0, eps + 1)[0]


def zcdp_eps_classic(rho: float, delta: float) -> float:
    """Bun & Steinke (2016): rho-zCDP implies (rho + 2 sqrt(rho log(1/delta)), delta)-DP."""
    return rho + 2 * math.sqrt(rho * math.log(1 / delta))


def zcdp_rho_classic(eps: float, delta: float) -> float:
    """The rho whose classic bound (`zcdp_eps_classic`) is exactly eps: (sqrt(log(1/delta) + eps) -
    sqrt(log(1/delta)))^2 (the RDP conversion of PreFair's Thm 4)."""
    return (math.sqrt(math.log(1 / delta) + eps) - math.sqrt(math.log(1 / delta))) ** 2


def zcdp_rho(eps: float, delta: float, conversion: str = "cks20") -> float:
    """The zCDP budget rho of (eps, delta): `cks20` the largest rho that converts to it exactly (`cdp_rho`),
    `rdp_classic` by the classic bound (`zcdp_rho_classic`). eps = inf is the noise-free limit, rho = inf."""
    if math.isinf(eps):
        return math.inf
    if conversion == "cks20":
        return cdp_rho(eps, delta)
    if conversion == "rdp_classic":
        return zcdp_rho_classic(eps, delta)
    raise ValueError(f"unknown zCDP conversion {conversion!r}; allowed: cks20, rdp_classic")


def zcdp_sigma(rho: float, sq_sensitivity: float = 1.0) -> float:
    """The Gaussian noise sigma at which a release of squared L2 sensitivity `sq_sensitivity` is rho-zCDP
    (rho = Delta^2 / (2 sigma^2)), i.e. sqrt(sq_sensitivity / (2 rho)): equally, the sigma of a unit-sensitivity
    release at rho / sq_sensitivity. 0 at rho = inf."""
    return math.sqrt(sq_sensitivity / (2 * rho))


def zcdp_exponential_eps(rho: float, rounds: int = 1) -> float:
    """The eps of each of `rounds` exponential mechanisms that together are rho-zCDP (each eps^2/8-zCDP, the
    bounded-range bound of Cesar & Rogers 2021): sqrt(8 rho / rounds)."""
    return math.sqrt(8 * rho / rounds)


def rdp_to_dp(orders, rdp, delta: float, conversion: str = "classic") -> tuple[float, float]:
    """(eps, best order) from an RDP curve.

    `classic`: eps = min_a rdp(a) + log(1/delta)/(a-1) (Mironov 2017; the thesis' moments accountant).
    `balle2020`: eps = min_a rdp(a) + log((a-1)/a) - (log delta + log a)/(a-1) (Opacus >= 1.0).
    """
    a = np.asarray(orders, dtype=float)
    r = np.asarray(rdp, dtype=float)
    if conversion == "classic":
        eps = r + math.log(1 / delta) / (a - 1)
    elif conversion == "balle2020":
        eps = r + np.log1p(-1 / a) - (math.log(delta) + np.log(a)) / (a - 1)
    else:
        raise ValueError(f"unknown RDP conversion {conversion!r}; allowed: classic, balle2020")
    i = int(np.nanargmin(eps))
    return max(float(eps[i]), 0.0), float(a[i])


def pure_dp_rdp(eps: float, orders) -> np.ndarray:
    """RDP curve of an eps-DP mechanism: min(eps, a eps^2 / 2) (via eps^2/2-zCDP)."""
    a = np.asarray(orders, dtype=float)
    return np.minimum(eps, a * square(eps) / 2)


def zcdp_rdp(rho: float, orders) -> np.ndarray:
    """RDP curve of a rho-zCDP mechanism: rho a at every order a (the definition of zCDP, so exact)."""
    return rho * np.asarray(orders, dtype=float)
