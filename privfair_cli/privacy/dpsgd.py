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

Two accountings (`accounting`, the family's `algo.accounting`; ACCOUNTINGS):
- `rdp` (the thesis'): the RDP curves above, converted by `conversion`. DPSGD-F / Naive add the counts' curve to
  the gradients' as a second subsampled Gaussian, as the thesis does.
- `pld`: dp-accounting's privacy loss distribution accountant (`PLDAccountant`, its pessimistic discretisation at
  PLD_DISCRETIZATION, widened below sigma 1: an upper bound on eps), the tightest sound bound dp-accounting gives
  (Opacus issue #643's setting, sigma 3, q 0.2, 50 steps, delta 1e-5: PLD 2.06, RDP 2.27 with dp-accounting's
  conversion, 2.27 balle2020, 2.66 classic). Poisson: `PoissonSampledDpEvent(q, GaussianDpEvent(sigma))` composed
  T times; shuffle: `GaussianDpEvent(sigma / 2)` composed once per pass. DPSGD-F / Naive draw the gradient noise
  and the count noise on the same batch, so a step is one subsampled Gaussian of multiplier
  (sigma^-2 + sigma1^-2)^-1/2 (`joint_multiplier`, exact: the pair is a Gaussian release of the two sums).
  `fixed_uniform` has no PLD in dp-accounting (sampling without replacement): it falls back to the RDP curve of
  that joint step with the balle2020 conversion (`accountant_name` says which was used).
"""

from __future__ import annotations

import functools
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
ACCOUNTINGS = ("pld", "rdp")
PLD_SAMPLINGS = ("poisson", "shuffle")  # what dp-accounting's PLD accountant supports; fixed_uniform falls back
# dp-accounting's default grid of privacy-loss values (`_step_pld` widens it by sigma^-2 below sigma 1, where the
# losses' range grows as sigma^-2): its pessimistic discretisation rounds losses up, so a coarser grid only raises
# eps (1e-3 instead of 1e-4 would add 0.0045 at Adult's sigma 2 and 17 % at sigma 10; the widened grid adds 1e-5
# relative at sigma 0.5-0.8). One evaluation takes 0.1-1 s at any sigma; the 1e-4 grid took 9 s at sigma 0.3 and
# minutes below 0.1, where the calibration of a large eps and fixed small sigmas go.
PLD_DISCRETIZATION = 1e-4
PLD_FALLBACK_CONVERSION = "balle2020"  # `pld` with fixed_uniform batches: RDP with the tighter of our conversions


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


def joint_multiplier(sigma: float, sigma1: float | None) -> float:
    """The noise multiplier of one step of DPSGD-F / Naive as one Gaussian: the gradient sum (multiplier sigma of
    its sensitivity) and the counts (sigma1) drawn on the same batch move by sqrt(sigma^-2 + sigma1^-2) noise
    standard deviations together, so the pair is the Gaussian of multiplier (sigma^-2 + sigma1^-2)^-1/2. sigma
    itself without counts; 0 (no noise) if either is 0."""
    if sigma1 is None:
        return sigma
    if sigma == 0 or sigma1 == 0:
        return 0.0
    return 1 / math.sqrt(sigma ** -2 + sigma1 ** -2)


def accountant_name(accounting: str, sampling: Sampling | None = None, conversion: str = "classic") -> str:
    """What computes a run's eps: `pld`, or `rdp_<conversion>` (`rdp`, or `pld` on batches it cannot take)."""
    if accounting not in ACCOUNTINGS:
        raise ConfigError(f"algo.accounting={accounting!r}; allowed: {', '.join(ACCOUNTINGS)}")
    if accounting == "pld" and (sampling is None or sampling.kind in PLD_SAMPLINGS):
        return "pld"
    return f"rdp_{PLD_FALLBACK_CONVERSION if accounting == 'pld' else conversion}"


def pld_epsilon(q: float, sigma: float, steps: int, delta: float, sigma1: float | None = None,
                sampling: Sampling | None = None, orders=accountants.DEFAULT_RDP_ORDERS) -> float:
    """eps at `delta` of `steps` steps under `accounting: pld` (module docstring): dp-accounting's PLD accountant of
    the step's subsampled Gaussian (the joint one with the counts of DPSGD-F / Naive); fixed_uniform batches by the
    RDP curve of that step with the balle2020 conversion."""
    if steps <= 0:
        return 0.0
    s = joint_multiplier(sigma, sigma1)
    if s == 0:
        return math.inf  # no noise (eps = inf, the noise-free limit): no guarantee
    if s < SIGMA_MIN:
        raise ConfigError(f"a noise multiplier of {s:g} is below {SIGMA_MIN:g}, the smallest the accountant "
                          "handles; raise algo.sigma (or algo.sigma1_ratio)")
    kind = "poisson" if sampling is None else sampling.kind
    try:
        if kind == "poisson":
            return float(_step_pld(s, q).self_compose(steps).get_epsilon_for_delta(delta))
        if kind == "shuffle":  # one Gaussian of the clipped sum per pass, replace-one (multiplier s / 2), composed
            return float(_step_pld(s / 2 / math.sqrt(sampling.passes(steps)), 1.0).get_epsilon_for_delta(delta))
    except OverflowError:  # losses of order sigma^-2: dp-accounting's grid overflows for tiny multipliers
        raise ConfigError(f"a noise multiplier of {s:g} is below what dp-accounting's PLD accountant handles (its "
                          "privacy losses overflow); raise algo.sigma (or algo.sigma1_ratio), or give "
                          "algo.accounting=rdp") from None
    return accountants.rdp_to_dp(orders, sampled_gaussian_rdp(q, s, steps, orders, sampling), delta,
                                 PLD_FALLBACK_CONVERSION)[0]


@functools.lru_cache(maxsize=64)
def _step_pld(sigma: float, q: float):
    """The PLD of one Gaussian step of multiplier sigma, Poisson-sampled at rate q (q = 1: no sampling), built as
    dp-accounting's `PLDAccountant` builds it for `PoissonSampledDpEvent(q, GaussianDpEvent(sigma))` (or
    `GaussianDpEvent(sigma)`) on a grid of PLD_DISCRETIZATION * max(1, sigma^-2); T steps are its
    `self_compose(T)`, as the accountant composes them. Kept: a run asks the same step for every epoch's eps, and
    the charge asks the calibration's last sigma again."""
    from dp_accounting.pld import privacy_loss_distribution

    kw = {} if q == 1 else {"sampling_prob": q}
    return privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=sigma, value_discretization_interval=PLD_DISCRETIZATION * max(1.0, sigma ** -2), **kw)


def run_rdp(q: float, sigma: float, sigma1: float | None, steps: int, orders,
            sampling: Sampling | None = None) -> np.ndarray:
    """RDP of `steps` steps: gradients (multiplier sigma) plus, for DPSGD-F / Naive, the counts (sigma1)."""
    rdp = sampled_gaussian_rdp(q, sigma, steps, orders, sampling)
    return rdp if sigma1 is None else rdp + sampled_gaussian_rdp(q, sigma1, steps, orders, sampling)


def dpsgd_epsilon(q, sigma, steps, delta, sigma1=None, orders=accountants.DEFAULT_RDP_ORDERS,
                  conversion="classic", sampling: Sampling | None = None, accounting: str = "rdp") -> float:
    """eps of `steps` DP-SGD steps (plus, if `sigma1` is given, the per-step noisy counts of DPSGD-F / Naive)."""
    if accounting == "pld":
        return pld_epsilon(q, sigma, steps, delta, sigma1, sampling, orders)
    return accountants.rdp_to_dp(orders, run_rdp(q, sigma, sigma1, steps, orders, sampling), delta, conversion)[0]


def epsilon_after(q, sigma, sigma1, steps: np.ndarray, delta, orders=accountants.DEFAULT_RDP_ORDERS,
                  conversion="classic", sampling: Sampling | None = None, accounting: str = "rdp") -> np.ndarray:
    """eps spent after each entry of `steps` (e.g. the step count at the end of every epoch)."""
    if accounting == "pld":
        return np.array([pld_epsilon(q, sigma, int(t), delta, sigma1, sampling, orders) for t in steps])
    if sampling is None or sampling.kind != "shuffle":  # T steps cost T times one step
        one = run_rdp(q, sigma, sigma1, 1, orders, sampling)
        return np.array([accountants.rdp_to_dp(orders, t * one, delta, conversion)[0] if t else 0.0 for t in steps])
    return np.array([accountants.rdp_to_dp(orders, run_rdp(q, sigma, sigma1, int(t), orders, sampling), delta,
                                           conversion)[0] if t else 0.0 for t in steps])


def iterations_to_match(q, sigma, sigma1, steps, delta, orders=accountants.DEFAULT_RDP_ORDERS,
                        conversion="classic", sampling: Sampling | None = None, accounting: str = "rdp") -> int:
    """Fewest iterations to remove so that eps(gradients + counts, T - r) <= eps(gradients, T)."""
    kw = {"orders": orders, "conversion": conversion, "sampling": sampling, "accounting": accounting}
    target = dpsgd_epsilon(q, sigma, steps, delta, **kw)
    lo, hi = 0, steps
    while lo < hi:
        mid = (lo + hi) // 2
        if dpsgd_epsilon(q, sigma, steps - mid, delta, sigma1=sigma1, **kw) <= target:
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
                 conversion: str = "classic", accounting: str = "rdp") -> tuple[int, float]:
    """(T, eps_T): the most Poisson-sampled steps at rate q and multiplier sigma, up to `cap`, whose spend stays
    within eps (0 when not even one step fits), and that spend."""
    one = sampled_gaussian_rdp(q, sigma, 1, orders) if accounting == "rdp" else None

    def spend(t: int) -> float:
        if accounting == "pld":
            return pld_epsilon(q, sigma, t, delta)
        return accountants.rdp_to_dp(orders, t * one, delta, conversion)[0]

    if math.isinf(eps) or spend(cap) <= eps:
        return cap, spend(cap)
    lo, hi = 0, cap  # spend(lo) <= eps < spend(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if spend(mid) <= eps else (lo, mid)
    return lo, spend(lo) if lo else 0.0
