"""Privacy accounting of the DP-SGD family (dpsgd_f.md §2, foundations.md §2.6 `rdp_classic`).

Every step of DP-SGD is a Poisson-subsampled Gaussian (rate q = b / n_train, noise multiplier sigma); DPSGD-F and
Naive add a second one per step for the noisy counts (L2 sensitivity 1, multiplier sigma1). The RDP curve of one
step comes from dp-accounting's public API (`RdpAccountant` composing `PoissonSampledDpEvent(q,
GaussianDpEvent(sigma))`, read through its `rdp` property); T steps compose additively, and the curve is turned
into (eps, delta) by `privacy.accountants.rdp_to_dp`, which keeps the choice of conversion (`classic`, the
thesis' moments accountant, or `balle2020`). dp-accounting's own `get_epsilon` uses the newer conversion only,
so it is not used for the reported eps.

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

`plan_noise` turns the user's choices (a fixed sigma or `calibrate`, `match_budget`) into a `NoisePlan`, and
`charge` records it in the run's ledger before any step is taken (T, q, sigma are fixed in advance). eps = inf
with `sigma: calibrate` is the noise-free limit: sigma = 0, an infinite RDP curve in the ledger (eps_spent inf).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privfair_cli.errors import BudgetExceeded, ConfigError
from privfair_cli.privacy import accountants

# Section 9.5.1.3: iterations the thesis removes from the last epoch of DPSGD-F and Naive to match DPSGD's
# budget, by data card, with the thesis' T they apply to (spec §2 table). `match_budget: thesis` uses them only
# when T is within THESIS_T_TOLERANCE of the thesis' T (another size is another setting: exact matching).
THESIS_ITERATIONS_REMOVED = {"mnist": (22, 14062), "mnist_unbalanced": (19, 12808), "adult_balanced": (5, 1750),
                             "adult": (11, 2826), "dutch": (17, 3776), "dutch_unbalanced": (9, 2500)}
THESIS_T_TOLERANCE = 0.01
# `calibrate` searches noise multipliers from CALIBRATE_START upwards (doubling) and gives up beyond
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


@dataclass(frozen=True)
class NoisePlan:
    """What a private run releases: `steps` steps at rate q with gradient multiplier `sigma` and, for DPSGD-F /
    Naive, count multiplier `sigma1`; `removed` iterations dropped to match DPSGD's budget (spec C5)."""

    q: float
    sigma: float
    sigma1: float | None
    steps: int
    removed: int
    sampling: Sampling | None = None  # None: Poisson at rate q


def plan_noise(sigma: float | str, counts: bool, sigma1_ratio: float, match_budget: str, q: float, steps: int,
               budget, ledger, data_name: str, sampling: Sampling | None = None) -> NoisePlan:
    """The noise of a run: a fixed `sigma`, or `calibrate` (the smallest one whose whole spend fits the budget's
    eps); for DPSGD-F / Naive sigma1 = sigma1_ratio * sigma and the iterations removed by `match_budget`."""
    kw = {"orders": ledger.orders, "conversion": ledger.rdp_conversion, "sampling": sampling}
    if sigma == "calibrate":
        sigma = calibrate_sigma(q, steps, budget.eps, budget.delta, sigma1_ratio=sigma1_ratio if counts else None,
                                **kw)
    if not counts:
        return NoisePlan(q, float(sigma), None, steps, 0, sampling)
    sigma1 = sigma1_ratio * sigma
    printed, thesis_steps = THESIS_ITERATIONS_REMOVED.get(data_name, (0, 0))
    if match_budget == "thesis" and abs(steps - thesis_steps) <= THESIS_T_TOLERANCE * thesis_steps:
        removed = printed
    elif match_budget == "none":
        removed = 0
    else:
        removed = iterations_to_match(q, sigma, sigma1, steps, budget.delta, **kw)
    if removed >= steps:
        raise ConfigError(f"algo.match_budget={match_budget} would remove all {steps} steps; use more data or "
                          "epochs, or algo.match_budget=none")
    return NoisePlan(q, float(sigma), float(sigma1), steps - removed, removed, sampling)


def charge(plan: NoisePlan, ledger, gradient_sensitivity: float | str, note: str, counts_note: str = "") -> None:
    """Record the plan in the ledger (gradients, then counts); over budget names the way out."""
    poisson = plan.sampling is None or plan.sampling.kind == "poisson"
    how = {} if poisson else {"sampling": plan.sampling.kind, "neighbouring": plan.sampling.neighbouring}
    try:
        ledger.spend_rdp("subsampled_gaussian", sampled_gaussian_rdp(plan.q, plan.sigma, plan.steps, ledger.orders,
                                                                     plan.sampling),
                         note=note, sigma=plan.sigma, q=plan.q, steps=plan.steps, sensitivity=gradient_sensitivity,
                         **how)
    except BudgetExceeded as err:
        raise BudgetExceeded(f"{err}; with sigma={plan.sigma:g}, q={plan.q:.4g} and {plan.steps} steps: raise eps, "
                             "or set algo.sigma=calibrate to choose the noise for this budget") from None
    if plan.sigma1 is not None:
        ledger.spend_rdp("subsampled_gaussian", sampled_gaussian_rdp(plan.q, plan.sigma1, plan.steps, ledger.orders,
                                                                     plan.sampling),
                         note=counts_note, sigma=plan.sigma1, q=plan.q, steps=plan.steps, sensitivity=1.0, **how)
