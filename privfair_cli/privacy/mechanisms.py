"""Noise mechanisms. Each takes an explicit `numpy.random.Generator` and records its release in the ledger
*before* drawing noise, so a release past the budget never happens.

Sensitivities are arguments: callers derive them from the dataset card's declared bounds, never from the
private data.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr

from privfair_cli.errors import ConfigError
from privfair_cli.privacy.ledger import PrivacyLedger


def laplace(value, sensitivity: float, eps: float, rng: np.random.Generator, ledger: PrivacyLedger, note: str = ""):
    """value + Lap(0, sensitivity/eps) per coordinate; eps-DP for L1 sensitivity `sensitivity`."""
    ledger.spend_pure("laplace", eps, sensitivity, note)
    value = np.asarray(value, dtype=float)
    return value + rng.laplace(0.0, sensitivity / eps, size=value.shape)


def gaussian_sigma_classic(sensitivity: float, eps: float, delta: float) -> float:
    """Dwork & Roth Thm A.1: sigma = sqrt(2 ln(1.25/delta)) Delta_2 / eps, proven for 0 < eps < 1."""
    if not 0 < eps < 1:
        raise ConfigError(f"classic Gaussian calibration needs 0 < eps < 1 (got {eps}); use calibration=analytic")
    return math.sqrt(2 * math.log(1.25 / delta)) * sensitivity / eps


def _analytic_delta(sigma: float, sensitivity: float, eps: float) -> float:
    a = sensitivity / (2 * sigma)
    b = eps * sigma / sensitivity
    return math.exp(log_ndtr(a - b)) - math.exp(eps + log_ndtr(-a - b))


def gaussian_sigma_analytic(sensitivity: float, eps: float, delta: float) -> float:
    """Balle & Wang (2018), Thm 8: the smallest sigma whose exact privacy profile meets (eps, delta)."""
    if not (eps > 0 and 0 < delta < 1):
        raise ConfigError("analytic Gaussian needs eps > 0 and 0 < delta < 1")
    lo, hi = 1e-12 * sensitivity, sensitivity
    while _analytic_delta(hi, sensitivity, eps) > delta:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _analytic_delta(mid, sensitivity, eps) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def gaussian(
    value,
    sensitivity: float,
    eps: float,
    delta: float,
    rng: np.random.Generator,
    ledger: PrivacyLedger,
    note: str = "",
    calibration: str = "classic",
):
    """value + N(0, sigma^2) per coordinate, (eps, delta)-DP for L2 sensitivity `sensitivity`."""
    if calibration == "classic":
        sigma = gaussian_sigma_classic(sensitivity, eps, delta)
    elif calibration == "analytic":
        sigma = gaussian_sigma_analytic(sensitivity, eps, delta)
    else:
        raise ConfigError(f"gaussian calibration={calibration!r} is unknown; allowed: classic, analytic")
    ledger.spend_approx(f"gaussian_{calibration}", eps, delta, sensitivity, note)
    value = np.asarray(value, dtype=float)
    return value + rng.normal(0.0, sigma, size=value.shape)


def gaussian_zcdp(value, sensitivity: float, sigma: float, rng: np.random.Generator, ledger: PrivacyLedger,
                  note: str = ""):
    """value + N(0, sigma^2): (Delta_2^2 / (2 sigma^2))-zCDP (Bun & Steinke 2016). sigma = 0 is the noise-free
    limit (eps = inf): rho = inf, the value itself."""
    ledger.spend_zcdp("gaussian", sensitivity**2 / (2 * sigma**2) if sigma > 0 else math.inf, sensitivity, note)
    value = np.asarray(value, dtype=float)
    return value + rng.normal(0.0, sigma, size=value.shape)


def exponential_probabilities(scores, sensitivity: float, eps: float) -> np.ndarray:
    """P(r) proportional to exp(eps q_r / (2 S)); scores of -inf get probability 0. eps = inf is the noise-free
    limit: uniform over the best candidates."""
    if math.isinf(eps):
        best = np.asarray(scores, dtype=float) == np.max(scores)
        return best / best.sum()
    u = eps * np.asarray(scores, dtype=float) / (2 * sensitivity)
    u = u - np.max(u)
    p = np.exp(u)
    return p / p.sum()


def exponential(scores, sensitivity: float, eps: float, rng: np.random.Generator, ledger: PrivacyLedger,
                note: str = "", accounting: str = "pure") -> int:
    """Index of the selected candidate. `accounting`: `pure` (eps-DP) or `zcdp` (eps^2/8-zCDP, the
    bounded-range bound of Cesar & Rogers 2021 that MST uses)."""
    if accounting == "pure":
        ledger.spend_pure("exponential", eps, sensitivity, note)
    elif accounting == "zcdp":
        ledger.spend_zcdp("exponential", eps**2 / 8, sensitivity, note)
    else:
        raise ConfigError(f"exponential accounting={accounting!r} is unknown; allowed: pure, zcdp")
    p = exponential_probabilities(scores, sensitivity, eps)
    return int(rng.choice(len(p), p=p))


def heterogeneous(value, sensitivities, scales, rng: np.random.Generator, ledger: PrivacyLedger, note: str = "",
                  noise: str = "laplace", eps: float | None = None, claim: float = 0.0):
    """value + independent noise with its own scale per coordinate j: Laplace with scale `scales[j]`, or Gaussian
    with standard deviation `scales[j]` (`noise`). `sensitivities[j]` bounds how far replacing one record moves
    coordinate j (the functional mechanism's per-coefficient bounds; pdfc.md §2.4-2.5). The exact loss, recorded
    in the ledger before the draw:
      laplace:  eps-DP with eps = sum_j sensitivities[j] / scales[j] (the privacy-loss bound of pdfc.md §2.4);
      gaussian: a unit-variance Gaussian mechanism with L2 sensitivity R = ||sensitivities / scales||_2, so
                (eps, delta)-DP at the given `eps` with delta = Phi(R/2 - eps/R) - e^eps Phi(-R/2 - eps/R)
                (Balle & Wang 2018, Thm 8; pdfc.md §2.5).
    `claim` is the eps (laplace) or delta (gaussian) the algorithm reports for itself (e.g. Ding et al.'s
    eps_s/d + (d-1) eps_n/d); the ledger records the larger of the two, so neither understates the loss.
    A scale of 0 (eps = inf, the noise-free limit) gives infinite loss and no noise. Returns the noisy value and
    the exact loss (eps or delta)."""
    value = np.asarray(value, dtype=float)
    sens = np.broadcast_to(np.asarray(sensitivities, dtype=float), value.shape)
    scales = np.broadcast_to(np.asarray(scales, dtype=float), value.shape)
    with np.errstate(divide="ignore"):
        ratio = np.where(sens > 0, sens / scales, 0.0)
    if noise == "laplace":
        exact = float(np.sum(ratio))
        ledger.spend_pure("laplace_heterogeneous", max(exact, claim), float(np.sum(sens)), note)
        draw = rng.laplace
    elif noise == "gaussian":
        if eps is None:
            raise ValueError("a Gaussian heterogeneous release needs the eps at which its delta is stated")
        r = float(np.sqrt(np.sum(ratio**2)))
        exact = 0.0 if math.isinf(eps) or r == 0 else _analytic_delta(1.0, r, eps)
        ledger.spend_approx("gaussian_heterogeneous", eps, max(exact, claim), float(np.sqrt(np.sum(sens**2))), note)
        draw = rng.normal
    else:
        raise ConfigError(f"heterogeneous noise={noise!r} is unknown; allowed: laplace, gaussian")
    return value + draw(0.0, 1.0, size=value.shape) * scales, exact
