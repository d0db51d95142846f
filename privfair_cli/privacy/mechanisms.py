"""Noise mechanisms. Each records its release in the ledger *before* drawing noise, so a release past the budget
never happens, then draws the noise from a `NoiseSource` (`noise.py`): the `rng` argument is the run's
NoiseSource (seeded or secure) or, in tests and scripts, a plain numpy Generator, used as a seeded source.

Sensitivities are arguments: callers derive them from the dataset card's declared bounds, never from the
private data.

eps = inf is the noise-free limit: Laplace and Gaussian add no noise (scale 0), the exponential mechanism picks
uniformly among the best-scoring candidates, and the ledger records the release at eps (or rho) = inf.

Secure mode (noise.py) changes one calibration: the Gaussian mechanism is then the discrete Gaussian, whose
(eps, delta) guarantee privfair derives from its zCDP bound (exact, OpenDP's privacy map) with the conversion of
Canonne, Kamath and Steinke (2020); sigma is the larger of the configured calibration's and that bound's.
"""

from __future__ import annotations

import math

import numpy as np

from privfair_cli import lazy
from privfair_cli.errors import ConfigError
from privfair_cli.privacy import accountants
from privfair_cli.privacy.ledger import PrivacyLedger
from privfair_cli.privacy.noise import noise_source

special = lazy.module("scipy.special")


def laplace(value, sensitivity: float, eps: float, rng: np.random.Generator, ledger: PrivacyLedger, note: str = ""):
    """value + Lap(0, sensitivity/eps) per coordinate; eps-DP for L1 sensitivity `sensitivity`."""
    ledger.spend_pure("laplace", eps, sensitivity, note)
    return noise_source(rng).add_laplace(value, sensitivity / eps)


def gaussian_sigma_classic(sensitivity: float, eps: float, delta: float) -> float:
    """Dwork & Roth Thm A.1: sigma = sqrt(2 ln(1.25/delta)) Delta_2 / eps, proven for 0 < eps < 1."""
    if math.isinf(eps):
        return 0.0
    if not 0 < eps < 1:
        raise ConfigError(f"classic Gaussian calibration needs 0 < eps < 1 (got {eps}); use calibration=analytic")
    return math.sqrt(2 * math.log(1.25 / delta)) * sensitivity / eps


def _analytic_delta(sigma: float, sensitivity: float, eps: float) -> float:
    a = sensitivity / (2 * sigma)
    b = eps * sigma / sensitivity
    return math.exp(special.log_ndtr(a - b)) - math.exp(eps + special.log_ndtr(-a - b))


def gaussian_sigma_analytic(sensitivity: float, eps: float, delta: float) -> float:
    """Balle & Wang (2018), Thm 8: the smallest sigma whose exact privacy profile meets (eps, delta)."""
    if not (eps > 0 and 0 < delta < 1):
        raise ConfigError("analytic Gaussian needs eps > 0 and 0 < delta < 1")
    if math.isinf(eps):
        return 0.0
    lo, hi = 1e-12 * sensitivity, sensitivity
    while _analytic_delta(hi, sensitivity, eps) > delta:
        hi *= 2
    return accountants.bisect(lambda s: not _analytic_delta(s, sensitivity, eps) > delta, lo, hi, max_iter=200)[1]


def gaussian_sigma_zcdp(sensitivity: float, eps: float, delta: float) -> float:
    """The sigma whose zCDP bound Delta^2 / (2 sigma^2) converts to (eps, delta)-DP (CKS 2020)."""
    rho = accountants.cdp_rho(eps, delta)
    return 0.0 if math.isinf(rho) else sensitivity / math.sqrt(2 * rho)


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
    source = noise_source(rng)
    if source.secure:
        sigma = max(sigma, gaussian_sigma_zcdp(sensitivity, eps, delta))
    ledger.spend_approx(f"gaussian_{calibration}", eps, delta, sensitivity, note)
    return source.add_gaussian(value, sigma)


def gaussian_zcdp(value, sensitivity: float, sigma: float, rng: np.random.Generator, ledger: PrivacyLedger,
                  note: str = ""):
    """value + N(0, sigma^2): (Delta_2^2 / (2 sigma^2))-zCDP (Bun & Steinke 2016); sigma = 0 is rho = inf."""
    rho = accountants.square(sensitivity) / (2 * accountants.square(sigma)) if sigma > 0 else math.inf
    ledger.spend_zcdp("gaussian", rho, sensitivity, note)
    return noise_source(rng).add_gaussian(value, sigma)


def exponential_logits(scores, sensitivity: float, eps: float) -> np.ndarray:
    """eps q_r / (2 S) per candidate; at eps = inf, 0 for the best-scoring candidates and -inf for the others."""
    q = np.asarray(scores, dtype=float)
    if math.isinf(eps):
        return np.where(q == np.max(q), 0.0, -np.inf)
    return eps * q / (2 * sensitivity)


def exponential_probabilities(scores, sensitivity: float, eps: float) -> np.ndarray:
    """P(r) proportional to exp(eps q_r / (2 S)); scores of -inf get probability 0."""
    u = exponential_logits(scores, sensitivity, eps)
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
        ledger.spend_zcdp("exponential", accountants.square(eps) / 8, sensitivity, note)
    else:
        raise ConfigError(f"exponential accounting={accounting!r} is unknown; allowed: pure, zcdp")
    return noise_source(rng).select(exponential_logits(scores, sensitivity, eps))


def heterogeneous(value, sensitivities, scales, rng: np.random.Generator, ledger: PrivacyLedger, note: str = "",
                  noise: str = "laplace", eps: float | None = None, claim: float = 0.0):
    """value + independent noise with its own scale per coordinate j: Laplace with scale `scales[j]`, or Gaussian
    with standard deviation `scales[j]` (`noise`). `sensitivities[j]` bounds how far replacing one record moves
    coordinate j (the functional mechanism's per-coefficient bounds; pdfc.md §2.4-2.5). The exact loss, recorded
    in the ledger before the draw:
      laplace:  eps-DP with eps = sum_j sensitivities[j] / scales[j] (the privacy-loss bound of pdfc.md §2.4);
      gaussian: a unit-variance Gaussian mechanism with L2 sensitivity R = ||sensitivities / scales||_2, so
                (eps, delta)-DP at the given `eps` with delta = Phi(R/2 - eps/R) - e^eps Phi(-R/2 - eps/R)
                (Balle & Wang 2018, Thm 8; pdfc.md §2.5); in secure mode (discrete Gaussian) the delta of its
                R^2/2-zCDP bound at `eps` (CKS 2020) instead.
    `claim` is the eps (laplace) or delta (gaussian) the algorithm reports for itself (e.g. Ding et al.'s
    eps_s/d + (d-1) eps_n/d); the ledger records the larger of the two, so neither understates the loss.
    A scale of 0 (eps = inf, the noise-free limit) gives infinite loss and no noise. Returns the noisy value and
    the exact loss (eps or delta)."""
    value = np.asarray(value, dtype=float)
    sens = np.broadcast_to(np.asarray(sensitivities, dtype=float), value.shape)
    scales = np.broadcast_to(np.asarray(scales, dtype=float), value.shape)
    source = noise_source(rng)
    with np.errstate(divide="ignore"):
        ratio = np.where(sens > 0, sens / scales, 0.0)
    if noise == "laplace":
        exact = float(np.sum(ratio))
        ledger.spend_pure("laplace_heterogeneous", max(exact, claim), float(np.sum(sens)), note)
        return source.add_laplace(value, scales), exact
    if noise != "gaussian":
        raise ConfigError(f"heterogeneous noise={noise!r} is unknown; allowed: laplace, gaussian")
    if eps is None:
        raise ValueError("a Gaussian heterogeneous release needs the eps at which its delta is stated")
    r = float(np.sqrt(np.sum(ratio**2)))
    if math.isinf(eps) or r == 0:
        exact = 0.0
    elif source.secure:
        exact = accountants.cdp_delta(r**2 / 2, eps)
    else:
        exact = _analytic_delta(1.0, r, eps)
    ledger.spend_approx("gaussian_heterogeneous", eps, max(exact, claim), float(np.sqrt(np.sum(sens**2))), note)
    return source.add_gaussian(value, scales), exact
