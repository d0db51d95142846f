"""DP-SGD's accountant (dpsgd_f.md §2, foundations.md §2.6 `rdp_classic`): pure formulas, pinned in the tests to
dp-accounting and Opacus. The plugins' use of them (the noise plan of a run, its charge in the ledger) is in
`algorithms/dpsgd_accounting.py`; DP-WGAN's critic steps use the same curve.

Every step of DP-SGD is a Poisson-subsampled Gaussian (rate q = b / n_train, noise multiplier sigma); DPSGD-F and
Naive add a second one per step for the noisy counts (L2 sensitivity 1, multiplier sigma1). The RDP curve of one
step comes from dp-accounting's public API (`RdpAccountant` composing `PoissonSampledDpEvent(q,
GaussianDpEvent(sigma))`, read through its `rdp` property); T steps compose additively, and the curve is turned
into (eps, delta) by `accountants.rdp_to_dp`, which keeps the choice of conversion (`classic`, the thesis' moments
accountant, or `balle2020`). dp-accounting's own `get_epsilon` uses the newer conversion only, so it is not used
for the reported eps.

What the accountant assumes follows the batches the run actually draws (`Sampling`, the trainer's
`batch_sampling`), never the family's default:
- `poisson` (default): the Poisson-subsampled Gaussian above, add/remove adjacency (the thesis' accountant).
- `shuffle`: no amplification. Each pass over a fresh permutation puts an example in exactly one batch, so a pass
  is one Gaussian release of a clipped sum; the passes compose (q = 1). The partition is of row positions, so the
  bound is for replace-one adjacency, where one changed example moves the sum by up to 2C: multiplier sigma / 2.
- `fixed_uniform`: b distinct rows per step, sampling without replacement (Wang, Balle & Kasiviswanathan 2019,
  dp-accounting's `SampledWithoutReplacementDpEvent`), also replace-one, multiplier sigma / 2.
The noisy counts of DPSGD-F / Naive take the same factor (their replace-one L2 sensitivity is sqrt(2) <= 2).
A noise multiplier below SIGMA_MIN is refused: dp-accounting's formulas divide by sigma^2 and fail below it.
eps = inf with `calibrate_sigma` is the noise-free limit: sigma = 0, an infinite RDP curve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privfair_cli.errors import ConfigError
from privfair_cli.privacy import accountants

# `calibrate_sigma` searches noise multipliers from CALIBRATE_START upwards (doubling) and gives up beyond
# CALIBRATE_MAX (the model would learn nothing); the answer is the smallest fitting sigma to CALIBRATE_RTOL.
CALIBRATE_START, CALIBRATE_MAX, CALIBRATE_RTOL = 1.0, 1e4, 1e-3
CALIBRATE_FLOOR = 0.05  # lower end of the first bracket when sigma = CALIBRATE_START already fits
SIGMA_MIN = 1e-6  # the smallest noise multiplier the RDP accountant is asked about (eps there is about 1e13)
SAMPLINGS = ("poisson", "shuffle", "fixed_uniform")


@dataclass(frozen=True)
class Sampling:
    """How a run's batches are drawn (`batch_sampling`) from n rows with nominal size b: what the accountant
    assumes (module docstring)."""

    kind: str
    n: int
    b: int

    @property
    def q(self) -> float:
        return self.b / self.n

    @property
    def neighbouring(self) -> str:
        return "add_remove" if self.kind == "poisson" else "replace_one"

    def passes(self, steps: int) -> int:
        """Permutations a shuffled run of `steps` steps draws (`dpsgd_trainer.batches`: n // b batches each)."""
        return -(-steps // max(self.n // self.b, 1))


def sampled_gaussian_rdp(q: float, sigma: float, steps: int, orders, sampling: Sampling | None = None) -> np.ndarray:
    """RDP curve (on `orders`) of `steps` steps with gradient multiplier sigma, from dp-accounting's public
    `RdpAccountant`: the Poisson-subsampled Gaussian at rate q, or what `sampling` (shuffle, fixed_uniform) gives."""
    from dp_accounting import (
        GaussianDpEvent,
        NeighboringRelation,
        PoissonSampledDpEvent,
        SampledWithoutReplacementDpEvent,
    )
    from dp_accounting.rdp import RdpAccountant

    if steps <= 0:
        return np.zeros(len(orders))
    if sigma == 0:
        return np.full(len(orders), np.inf)  # no noise (eps = inf, the noise-free limit): no guarantee
    if sigma < SIGMA_MIN:
        raise ConfigError(f"a noise multiplier of {sigma:g} is below {SIGMA_MIN:g}, the smallest the RDP accountant "
                          "handles; raise algo.sigma (or algo.sigma1_ratio)")
    kind = "poisson" if sampling is None else sampling.kind
    if kind == "poisson":
        accountant = RdpAccountant(list(orders))
        accountant.compose(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), 1)
        return steps * accountant.rdp
    if kind == "shuffle":
        accountant = RdpAccountant(list(orders))
        accountant.compose(GaussianDpEvent(sigma / 2), sampling.passes(steps))
        return accountant.rdp
    if kind == "fixed_uniform":
        accountant = RdpAccountant(list(orders), neighboring_relation=NeighboringRelation.REPLACE_ONE)
        accountant.compose(SampledWithoutReplacementDpEvent(sampling.n, min(sampling.b, sampling.n),
                                                            GaussianDpEvent(sigma / 2)), 1)
        return steps * accountant.rdp
    raise ConfigError(f"algo.batch_sampling={kind!r}; allowed: {', '.join(SAMPLINGS)}")


def run_rdp(q: float, sigma: float, sigma1: float | None, steps: int, orders,
            sampling: Sampling | None = None) -> np.ndarray:
    """RDP of `steps` steps: gradients (multiplier sigma) plus, for DPSGD-F / Naive, the counts (sigma1)."""
    rdp = sampled_gaussian_rdp(q, sigma, steps, orders, sampling)
    return rdp if sigma1 is None else rdp + sampled_gaussian_rdp(q, sigma1, steps, orders, sampling)


def dpsgd_epsilon(q, sigma, steps, delta, sigma1=None, orders=accountants.DEFAULT_RDP_ORDERS,
                  conversion="classic", sampling: Sampling | None = None) -> float:
    """eps of `steps` DP-SGD steps (plus, if `sigma1` is given, the per-step noisy counts of DPSGD-F / Naive)."""
    return accountants.rdp_to_dp(orders, run_rdp(q, sigma, sigma1, steps, orders, sampling), delta, conversion)[0]


def epsilon_after(q, sigma, sigma1, steps: np.ndarray, delta, orders=accountants.DEFAULT_RDP_ORDERS,
                  conversion="classic", sampling: Sampling | None = None) -> np.ndarray:
    """eps spent after each entry of `steps` (e.g. the step count at the end of every epoch)."""
    if sampling is None or sampling.kind != "shuffle":  # T steps cost T times one step
        one = run_rdp(q, sigma, sigma1, 1, orders, sampling)
        return np.array([accountants.rdp_to_dp(orders, t * one, delta, conversion)[0] if t else 0.0 for t in steps])
    return np.array([accountants.rdp_to_dp(orders, run_rdp(q, sigma, sigma1, int(t), orders, sampling), delta,
                                           conversion)[0] if t else 0.0 for t in steps])


def iterations_to_match(q, sigma, sigma1, steps, delta, orders=accountants.DEFAULT_RDP_ORDERS,
                        conversion="classic", sampling: Sampling | None = None) -> int:
    """Fewest iterations to remove so that eps(gradients + counts, T - r) <= eps(gradients, T)."""
    target = accountants.rdp_to_dp(orders, run_rdp(q, sigma, None, steps, orders, sampling), delta, conversion)[0]
    lo, hi = 0, steps
    while lo < hi:
        mid = (lo + hi) // 2
        if accountants.rdp_to_dp(orders, run_rdp(q, sigma, sigma1, steps - mid, orders, sampling), delta,
                                 conversion)[0] <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def calibrate_sigma(q, steps, eps, delta, sigma1_ratio=None, **kw) -> float:
    """Smallest noise multiplier (to CALIBRATE_RTOL) whose spend fits eps (counts at sigma1_ratio * sigma); 0 at
    eps = inf, the noise-free limit."""
    if math.isinf(eps):
        return 0.0

    def spend(s):
        return dpsgd_epsilon(q, s, steps, delta, sigma1=None if sigma1_ratio is None else sigma1_ratio * s, **kw)

    lo, hi = CALIBRATE_FLOOR, CALIBRATE_START
    while spend(hi) > eps:
        lo, hi = hi, hi * 2
        if hi > CALIBRATE_MAX:
            raise ConfigError(f"eps={eps} is too small for DP-SGD with q={q:.4g} and {steps} steps (it would need "
                              f"a noise multiplier above {CALIBRATE_MAX:g}): raise eps or lower algo.epochs")
    while hi / lo > 1 + CALIBRATE_RTOL:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if spend(mid) <= eps else (mid, hi)
    return hi


def steps_within(q: float, sigma: float, cap: int, eps: float, delta: float, orders=accountants.DEFAULT_RDP_ORDERS,
                 conversion: str = "classic") -> tuple[int, float]:
    """(T, eps_T): the most Poisson-sampled steps at rate q and multiplier sigma, up to `cap`, whose spend stays
    within eps (0 when not even one step fits), and that spend."""
    one = sampled_gaussian_rdp(q, sigma, 1, orders)

    def spend(t: int) -> float:
        return accountants.rdp_to_dp(orders, t * one, delta, conversion)[0]

    if math.isinf(eps) or spend(cap) <= eps:
        return cap, spend(cap)
    lo, hi = 0, cap  # spend(lo) <= eps < spend(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if spend(mid) <= eps else (lo, mid)
    return lo, spend(lo) if lo else 0.0
