"""Privacy accounting of the DP-SGD family (dpsgd_f.md §2, foundations.md §2.6 `rdp_classic`).

Every step of DP-SGD is a Poisson-subsampled Gaussian (rate q = b / n_train, noise multiplier sigma); DPSGD-F and
Naive add a second one per step for the noisy counts (L2 sensitivity 1, multiplier sigma1). The RDP curve of one
step comes from dp-accounting's public API (`RdpAccountant` composing `PoissonSampledDpEvent(q,
GaussianDpEvent(sigma))`, read through its `rdp` property); T steps compose additively, and the curve is turned
into (eps, delta) by `privacy.accountants.rdp_to_dp`, which keeps the choice of conversion (`classic`, the
thesis' moments accountant, or `balle2020`). dp-accounting's own `get_epsilon` uses the newer conversion only,
so it is not used for the reported eps.

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


def sampled_gaussian_rdp(q: float, sigma: float, steps: int, orders) -> np.ndarray:
    """RDP curve (on `orders`) of `steps` compositions of the Poisson-subsampled Gaussian (rate q, multiplier
    sigma), from dp-accounting's public `RdpAccountant`."""
    from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent
    from dp_accounting.rdp import RdpAccountant

    if steps <= 0:
        return np.zeros(len(orders))
    if sigma == 0:
        return np.full(len(orders), np.inf)  # no noise (eps = inf, the noise-free limit): no guarantee
    accountant = RdpAccountant(list(orders))
    accountant.compose(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), 1)
    return steps * accountant.rdp


def step_rdp(q: float, sigma: float, sigma1: float | None, orders) -> np.ndarray:
    """RDP of one step: gradients (multiplier sigma) plus, for DPSGD-F / Naive, the counts (sigma1)."""
    rdp = sampled_gaussian_rdp(q, sigma, 1, orders)
    return rdp if sigma1 is None else rdp + sampled_gaussian_rdp(q, sigma1, 1, orders)


def dpsgd_epsilon(q, sigma, steps, delta, sigma1=None, orders=accountants.DEFAULT_RDP_ORDERS,
                  conversion="classic") -> float:
    """eps of `steps` DP-SGD steps (plus, if `sigma1` is given, the per-step noisy counts of DPSGD-F / Naive)."""
    rdp = sampled_gaussian_rdp(q, sigma, steps, orders)
    if sigma1 is not None:
        rdp = rdp + sampled_gaussian_rdp(q, sigma1, steps, orders)
    return accountants.rdp_to_dp(orders, rdp, delta, conversion)[0]


def epsilon_after(q, sigma, sigma1, steps: np.ndarray, delta, orders=accountants.DEFAULT_RDP_ORDERS,
                  conversion="classic") -> np.ndarray:
    """eps spent after each entry of `steps` (e.g. the step count at the end of every epoch)."""
    one = step_rdp(q, sigma, sigma1, orders)
    return np.array([accountants.rdp_to_dp(orders, t * one, delta, conversion)[0] if t else 0.0 for t in steps])


def iterations_to_match(q, sigma, sigma1, steps, delta, orders=accountants.DEFAULT_RDP_ORDERS,
                        conversion="classic") -> int:
    """Fewest iterations to remove so that eps(gradients + counts, T - r) <= eps(gradients, T)."""
    grad = sampled_gaussian_rdp(q, sigma, 1, orders)
    both = grad + sampled_gaussian_rdp(q, sigma1, 1, orders)
    target = accountants.rdp_to_dp(orders, steps * grad, delta, conversion)[0]
    lo, hi = 0, steps
    while lo < hi:
        mid = (lo + hi) // 2
        if accountants.rdp_to_dp(orders, (steps - mid) * both, delta, conversion)[0] <= target:
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


def plan_noise(sigma: float | str, counts: bool, sigma1_ratio: float, match_budget: str, q: float, steps: int,
               budget, ledger, data_name: str) -> NoisePlan:
    """The noise of a run: a fixed `sigma`, or `calibrate` (the smallest one whose whole spend fits the budget's
    eps); for DPSGD-F / Naive sigma1 = sigma1_ratio * sigma and the iterations removed by `match_budget`."""
    kw = {"orders": ledger.orders, "conversion": ledger.rdp_conversion}
    if sigma == "calibrate":
        sigma = calibrate_sigma(q, steps, budget.eps, budget.delta, sigma1_ratio=sigma1_ratio if counts else None,
                                **kw)
    if not counts:
        return NoisePlan(q, float(sigma), None, steps, 0)
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
    return NoisePlan(q, float(sigma), float(sigma1), steps - removed, removed)


def charge(plan: NoisePlan, ledger, gradient_sensitivity: float | str, note: str, counts_note: str = "") -> None:
    """Record the plan in the ledger (gradients, then counts); over budget names the way out."""
    try:
        ledger.spend_rdp("subsampled_gaussian", sampled_gaussian_rdp(plan.q, plan.sigma, plan.steps, ledger.orders),
                         note=note, sigma=plan.sigma, q=plan.q, steps=plan.steps, sensitivity=gradient_sensitivity)
    except BudgetExceeded as err:
        raise BudgetExceeded(f"{err}; with sigma={plan.sigma:g}, q={plan.q:.4g} and {plan.steps} steps: raise eps, "
                             "or set algo.sigma=calibrate to choose the noise for this budget") from None
    if plan.sigma1 is not None:
        ledger.spend_rdp("subsampled_gaussian", sampled_gaussian_rdp(plan.q, plan.sigma1, plan.steps, ledger.orders),
                         note=counts_note, sigma=plan.sigma1, q=plan.q, steps=plan.steps, sensitivity=1.0)
