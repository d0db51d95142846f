"""PATE's moments accountant (Papernot et al. 2017 as PATE-GAN uses it; ffpdg.md §5.2): pure formulas, pinned in
the tests. PATE-GAN (`algorithms/pategan.py`) releases noisy teacher votes and charges the ledger with them.

Per noisy label (votes noised by Lap(1 / lambda)) with vote gap g = |n_0 - n_1|, q = (2 + lambda g) /
(4 exp(lambda g)) and for l = 1..L the log moment grows by
alpha[l] += min(2 lambda^2 l (l + 1), log((1 - q) ((1 - q) / (1 - e^{2 lambda} q))^l + q e^{2 lambda l}));
eps_hat = min_l (alpha[l] + log(1 / delta)) / l. The second term of the min reads the vote gaps, so it is
data-dependent (`bound: data_dependent`, the paper's accountant); `data_independent` keeps only the first, valid
for every data set. As an RDP curve the moments give eps_RDP(l + 1) = alpha[l] / l; orders between integers take
the next integer's value (RDP is nondecreasing in the order), orders above L + 1 are inf.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Moments:
    """The accountant's settings (PATE-GAN's `Settings` extend them): vote noise Lap(1 / `lam`), L = `moments`
    log moments, which `bound` (`data_dependent` or `data_independent`)."""

    lam: float = 1.0
    moments: int = 100
    bound: str = "data_dependent"


def moments_update(gaps: np.ndarray, lam: float, moments: int, bound: str = "data_dependent") -> np.ndarray:
    """The increase of alpha[1..L] (length L) for noisy labels with vote gaps |n_0 - n_1| = `gaps` (spec §5.2)."""
    l = np.arange(1, moments + 1, dtype=float)[None, :]  # noqa: E741
    indep = 2 * lam**2 * l * (l + 1)
    if bound == "data_independent":
        return np.broadcast_to(indep, (len(gaps), moments)).sum(0)
    g = np.asarray(gaps, dtype=float)[:, None]
    q = (2 + lam * g) / (4 * np.exp(lam * g))
    denom = 1 - math.exp(2 * lam) * q
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        dep = np.log((1 - q) * ((1 - q) / denom) ** l + q * np.exp(2 * lam * l))
    dep = np.where((denom > 0) & np.isfinite(dep), dep, np.inf)
    return np.minimum(indep, dep).sum(0)


def epsilon(alpha: np.ndarray, delta: float) -> float:
    """eps_hat = min_l (alpha[l] + log(1/delta)) / l."""
    l = np.arange(1, len(alpha) + 1, dtype=float)  # noqa: E741
    return float(np.min((alpha + math.log(1 / delta)) / l))


def rdp_curve(alpha: np.ndarray, orders) -> np.ndarray:
    """RDP at `orders` from the moments: eps_RDP(l + 1) = alpha[l] / l; a non-integer order takes the next
    integer's value; orders beyond L + 1 (or below 2: the value at 2) as described in the module docstring."""
    L = len(alpha)
    out = []
    for a in orders:
        m = max(2, math.ceil(a)) - 1
        out.append(alpha[m - 1] / m if m <= L else math.inf)
    return np.asarray(out)
