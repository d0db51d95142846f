"""The DP-SGD family's privacy plan (dpsgd_f.md §2): the noise of a run and its charge in the ledger. The
accounting formulas it uses (the subsampled Gaussian's RDP curve for the run's `Sampling`, eps after T steps, noise
calibration, iterations to match a budget) are `privacy/dpsgd.py`.

`plan_noise` turns the user's choices (a fixed sigma or `calibrate`, `match_budget`, `accounting`) into a
`NoisePlan`, and `charge` records it in the run's ledger before any step is taken (T, q, sigma are fixed in
advance). eps = inf with `sigma: calibrate` is the noise-free limit: sigma = 0, an infinite spend in the ledger
(eps_spent inf).

The ledger's check is the calibration's own formula:
- `accounting: rdp` (the thesis'): the RDP curves of the gradients and, for DPSGD-F / Naive, of the counts, two
  entries the `rdp` ledger composes and converts with `budget.rdp_conversion`.
- `accounting: pld` (the default): the run is one (eps, delta) entry in a `basic` ledger (`XuSGDConfig.accountant`),
  its eps the very `pld_epsilon` value the calibration bounded, at the budget's delta; the entry's `extra` states
  the mechanism (sigma, sigma1, q, steps, sampling) and `accountant` (`pld`, or `rdp_balle2020` for fixed_uniform
  batches), which the run's result keeps. The ledger cannot recompute a PLD itself (it composes pure, zCDP, RDP
  and (eps, delta) entries), so it adds up the stated eps: sound for a run that is the ledger's only release.
"""

from __future__ import annotations

from dataclasses import dataclass

from privfair_cli.errors import BudgetExceeded, ConfigError
from privfair_cli.privacy.dpsgd import (
    Sampling,
    accountant_name,
    calibrate_sigma,
    iterations_to_match,
    pld_epsilon,
    sampled_gaussian_rdp,
)

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
    accounting: str = "rdp"  # rdp | pld (privacy/dpsgd.py ACCOUNTINGS)


def plan_noise(sigma: float | str, counts: bool, sigma1_ratio: float, match_budget: str, q: float, steps: int,
               budget, ledger, data_name: str, sampling: Sampling | None = None,
               accounting: str = "rdp") -> NoisePlan:
    """The noise of a run: a fixed `sigma`, or `calibrate` (the smallest one whose whole spend fits the budget's
    eps under `accounting`); for DPSGD-F / Naive sigma1 = sigma1_ratio * sigma and the iterations removed by
    `match_budget`."""
    accountant_name(accounting)  # refuses an unknown accounting
    kw = {"orders": ledger.orders, "conversion": ledger.rdp_conversion, "sampling": sampling,
          "accounting": accounting}
    if sigma == "calibrate":
        sigma = calibrate_sigma(q, steps, budget.eps, budget.delta, sigma1_ratio=sigma1_ratio if counts else None,
                                **kw)
    if not counts:
        return NoisePlan(q, float(sigma), None, steps, 0, sampling, accounting)
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
    return NoisePlan(q, float(sigma), float(sigma1), steps - removed, removed, sampling, accounting)


def over_budget(err: BudgetExceeded, plan: NoisePlan) -> BudgetExceeded:
    return BudgetExceeded(f"{err}; with sigma={plan.sigma:g}, q={plan.q:.4g} and {plan.steps} steps: raise eps, or "
                          "set algo.sigma=calibrate to choose the noise for this budget")


def charge(plan: NoisePlan, ledger, gradient_sensitivity: float | str, note: str, counts_note: str = "") -> None:
    """Record the plan in the ledger (`rdp`: gradients, then counts; `pld`: the run as one (eps, delta) entry, module
    docstring); over budget names the way out."""
    poisson = plan.sampling is None or plan.sampling.kind == "poisson"
    how = {} if poisson else {"sampling": plan.sampling.kind, "neighbouring": plan.sampling.neighbouring}
    if plan.accounting == "pld":
        charge_pld(plan, ledger, gradient_sensitivity, note, counts_note, how)
        return
    try:
        ledger.spend_rdp("subsampled_gaussian", sampled_gaussian_rdp(plan.q, plan.sigma, plan.steps, ledger.orders,
                                                                     plan.sampling),
                         note=note, sigma=plan.sigma, q=plan.q, steps=plan.steps, sensitivity=gradient_sensitivity,
                         **how)
    except BudgetExceeded as err:
        raise over_budget(err, plan) from None
    if plan.sigma1 is not None:
        ledger.spend_rdp("subsampled_gaussian", sampled_gaussian_rdp(plan.q, plan.sigma1, plan.steps, ledger.orders,
                                                                     plan.sampling),
                         note=counts_note, sigma=plan.sigma1, q=plan.q, steps=plan.steps, sensitivity=1.0, **how)


def charge_pld(plan: NoisePlan, ledger, gradient_sensitivity: float | str, note: str, counts_note: str,
               how: dict) -> None:
    """`accounting: pld`: one (eps, delta) entry of the whole run, eps = `pld_epsilon` of the plan at the budget's
    delta (what the calibration bounded), its mechanism and accountant in the entry's `extra`."""
    delta = ledger.budget.delta
    eps = pld_epsilon(plan.q, plan.sigma, plan.steps, delta, plan.sigma1, plan.sampling, ledger.orders)
    accountant = accountant_name("pld", plan.sampling)
    what = note if plan.sigma1 is None else f"{note} and {counts_note}"
    counts = {} if plan.sigma1 is None else {"sigma1": plan.sigma1, "counts_sensitivity": 1.0}
    try:
        ledger.spend_pld("subsampled_gaussian", eps, delta, "algo.accounting",
                         {"accountant": accountant, "sigma": plan.sigma, "q": plan.q, "steps": plan.steps,
                          "sensitivity": gradient_sensitivity} | counts | how, note=f"{what}, {accountant} accountant")
    except BudgetExceeded as err:
        raise over_budget(err, plan) from None
