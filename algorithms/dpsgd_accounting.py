"""The DP-SGD family's privacy plan (dpsgd_f.md §2): the noise of a run and its charge in the ledger. The
accounting formulas it uses (the subsampled Gaussian's RDP curve for the run's `Sampling`, eps after T steps, noise
calibration, iterations to match a budget) are `privacy/dpsgd.py`.

`plan_noise` turns the user's choices (a fixed sigma or `calibrate`, `match_budget`) into a `NoisePlan`, and
`charge` records it in the run's ledger before any step is taken (T, q, sigma are fixed in advance). eps = inf
with `sigma: calibrate` is the noise-free limit: sigma = 0, an infinite RDP curve in the ledger (eps_spent inf).
"""

from __future__ import annotations

from dataclasses import dataclass

from privfair_cli.errors import BudgetExceeded, ConfigError
from privfair_cli.privacy.dpsgd import Sampling, calibrate_sigma, iterations_to_match, sampled_gaussian_rdp

# Section 9.5.1.3: iterations the thesis removes from the last epoch of DPSGD-F and Naive to match DPSGD's
# budget, by data card, with the thesis' T they apply to (spec §2 table). `match_budget: thesis` uses them only
# when T is within THESIS_T_TOLERANCE of the thesis' T (another size is another setting: exact matching).
THESIS_ITERATIONS_REMOVED = {"mnist": (22, 14062), "mnist_unbalanced": (19, 12808), "adult_balanced": (5, 1750),
                             "adult": (11, 2826), "dutch": (17, 3776), "dutch_unbalanced": (9, 2500)}
THESIS_T_TOLERANCE = 0.01


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
