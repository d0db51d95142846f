"""White-box release checks (issue 46): what the ledger says about each release against what the fit did.

Every noisy release of a plugin goes through `privfair_cli.privacy`: a ledger entry (`spend_*`) and a draw of the
noise source (`add_laplace`, `add_gaussian`, `select`). An audited fit runs with a `Trace` (the release view's
recording noise source) while the ledger tells it of every entry (`ledger.OBSERVERS`), so the trace holds, in
order, every entry and every draw with its value before noise, its scale and its output. Four checks read it, none
of them sampling where a deterministic check exists:

- `ledger`: every draw is paid for. The draws between two entries form one release (a release may be drawn in
  chunks, all of one kind and one scale); a second release with no entry between it and the previous one, or a
  release mixing kinds or scales, is a release outside the ledger.
- `accounting`: the ledger's (eps, delta) against an independent composition of its entries with dp-accounting's
  PLD and RDP accountants (Laplace releases as `LaplaceDpEvent`, zCDP ones as `ZCDpEvent` or, for the Gaussian,
  `GaussianDpEvent`, DP-SGD's curves as `PoissonSampledDpEvent`s) and the plain sum of the entries' eps and delta
  (basic composition, valid for every entry): the claim must be at least the smallest of those valid bounds.
- `calibration`: the scale each draw used is at least the scale its entry implies (Laplace: sensitivity / eps;
  classic and analytic Gaussian: their sigma at (eps, delta); zCDP Gaussian: sensitivity / sqrt(2 rho)), and the
  noise actually added has the claimed distribution: the probability integral transforms of all draws of
  `audit.whitebox_fits` fits under the claimed Laplace, Gaussian or exponential-mechanism law (randomised for the
  selections) are tested for uniformity (Kolmogorov-Smirnov, p < `PVALUE`: fail), and the logits of the chosen
  candidates against their expectation under the claimed law (a z-test: a sharper selection than claimed,
  i.e. less noise, raises them).
- `sensitivity`: each release's value before noise on D and on adversarial neighbours: canary records at corners
  of the card's declared bounds (all features 0 or 1, a few one-hot, random corners; each label and group; the
  rarest, the commonest and random codes of the discrete attributes) added, and records of D removed; for an
  algorithm whose sensitivities are stated for replace-one neighbours (`REPLACE_ONE`), also pairs of corner
  records in the place of one removed row. The neighbour's fit is replayed with the same seeded noise and forced
  to the same outputs (`replay`), so its releases are the same queries on the neighbour. The largest change, in
  the norm of the entry's mechanism (L1 Laplace, L2 Gaussian, the scores of an exponential mechanism through
  its logits), must not exceed the declared sensitivity; a per-coordinate (heterogeneous) release is held to
  its privacy loss, sum_j |change_j| / scale_j <= eps (Laplace) or the exact delta of the Gaussian at the
  observed change <= its delta. A failure prints the neighbour.

DP-SGD's releases are its noisy gradients, drawn with torch inside the trainer: `sgd` checks them separately.
A pass shows that on the audited data and neighbours the code did what the ledger says; it does not prove the
declared sensitivity is a bound over all neighbours (the search is over the neighbours listed), nor that noise
drawn outside privfair's samplers is right (such releases are reported as not observed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from privfair_cli.errors import PrivfairError
from privfair_cli.privacy import ledger as ledger_mod
from privfair_cli.privacy import mechanisms
from privfair_cli.privacy.dpsgd import PLD_DISCRETIZATION, joint_multiplier
from privfair_cli.tools.audit.canaries import with_records
from privfair_cli.tools.audit.fitting import Setup, fit
from privfair_cli.tools.audit.replay import Diverged, Recording

PVALUE = 1e-6  # a goodness-of-fit test fails below this p-value: one false alarm in a million audits
REL_TOL = 1e-6  # a scale or sensitivity within this relative tolerance of its bound passes (float rounding)
ACCOUNTING_TOL = 0.01  # the claim may sit this fraction below an independent bound (discretisation of the PLD)
MAX_PIT = 200_000  # probability integral transforms kept per family (a random subset beyond)
# Algorithms whose sensitivities are stated for replace-one neighbours (the functional mechanism's coefficient
# bounds, pflr.md §1.4, pdfc.md §2.4-2.5): their sensitivity search also replaces a row by a corner record.
REPLACE_ONE = frozenset({"privlr", "pflr", "pflr_star", "pdfc", "adfc", "relaxed_fm",
                         # output perturbation of a regularised ERM (Chaudhuri et al. 2011): 2 / (n lam), replace-one
                         "cdp_zhu", "cdp_group", "crfs"})
LAPLACE_ENTRIES = ("laplace", "correlated_laplace", "laplace_empirical_sensitivity")


@dataclass
class Check:
    """One white-box check's result: `pass`, `fail` or `skipped` (nothing to check), what it found."""

    name: str
    verdict: str
    detail: str
    figures: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"


class Trace(Recording):
    """The release view's recording noise source that also keeps, in order, the ledger entries the fit makes and
    every draw: `events` holds ("spend", entry) and ("draw", k), k indexing `draws`, whose items are (kind, value
    before noise, scale, output, direct). A direct draw is Laplace or Gaussian noise a plugin takes from the
    generator itself after paying for it (lapmech's table, drawn in chunks): its value is unknown (zeros), so it
    is checked for its entry and its law, not for its sensitivity, unless the query it perturbs was observed
    (`query`, lapmech's full contingency table): then its direct flag is "known" and it carries that value."""

    def __init__(self, seed, replay=None, row_ids=None):
        super().__init__(seed, replay, row_ids)
        self.events: list[tuple] = []
        self.draws: list[tuple] = []
        self.own: list[OwnRelease] = []  # releases observed at their functions (`observing_own`)
        self.query, self.query_pos = None, 0  # the value before noise of the direct draws to come (lapmech)
        self.unaccounted = 0  # their draws made with no ledger (an internal evaluation its caller accounts for)
        self.columns = None  # the feature set such a release is made on (the correlated plugins' `final`)

    def _add(self, value, scale, kind):
        out = super()._add(value, scale, kind)
        self.draws.append(self.log[-1] + (False,))
        self.events.append(("draw", len(self.draws) - 1))
        return out

    def select(self, logits):
        i = super().select(logits)
        self.draws.append(self.log[-1] + (False,))
        self.events.append(("draw", len(self.draws) - 1))
        return i

    def _direct(self, kind, loc, scale, out):
        if not self.in_release:
            noise = np.asarray(out, dtype=float) - np.asarray(loc, dtype=float)
            value, known = np.zeros_like(noise), True
            if self.query is not None and self.query_pos + noise.size <= self.query.size:
                value = self.query[self.query_pos:self.query_pos + noise.size].reshape(noise.shape)
                self.query_pos += noise.size
                known = "known"
            self.draws.append((kind, value, np.broadcast_to(np.asarray(scale, dtype=float), noise.shape).copy(),
                               value + noise, known))
            self.events.append(("draw", len(self.draws) - 1))
        return out

    def laplace(self, loc=0.0, scale=1.0, size=None):
        return self._direct("laplace", loc, scale, super().laplace(loc, scale, size))

    def normal(self, loc=0.0, scale=1.0, size=None):
        return self._direct("gaussian", loc, scale, super().normal(loc, scale, size))


@contextlib.contextmanager
def observing(trace: Trace):
    """Within the block, every ledger entry is appended to `trace.events`."""
    def observe(_ledger, entry):
        trace.events.append(("spend", entry))

    ledger_mod.OBSERVERS.append(observe)
    try:
        yield trace
    finally:
        ledger_mod.OBSERVERS.remove(observe)


@dataclass
class OwnRelease:
    """A release whose noise a plugin draws from the generator itself with a law of density proportional to
    exp(-eps |b|_2 / (`norm_scale` sensitivity)) per noise vector b (norm Gamma(d, norm_scale sensitivity / eps),
    uniform direction), observed at its function (`observing_own`): `kind` "output" (the correlated plugins'
    output perturbation: released weights = `value` + noise, one entry per draw, sensitivity 2 kappa / (n lam))
    or "objective" (DPNE's objective perturbation: the rows eta_i of its noise term, one entry for all of them;
    `value` is the walk matrix M whose change Lemma 1 bounds); `noise` one vector per row."""

    kind: str
    value: np.ndarray
    noise: np.ndarray
    entries: list
    kappa: float = 1.0
    norm_scale: float = 1.0


OBJECTIVE_PERTURBATION = "objective_perturbation"


@contextlib.contextmanager
def observing_own(trace: Trace):
    """Within the block, the releases whose noise is drawn outside the noise source's mechanisms are observed at
    their functions (module attributes, restored after): the correlated plugins' output perturbation
    (`privfair_cli.privacy.correlated`) and DPNE's objective noise with the walk matrix it perturbs
    (`algorithms.dpne`) are kept in `trace.own`; lapmech's full contingency table, whose Laplace noise is drawn
    from the generator in chunks, gives those draws their value before noise (`Trace.query`)."""
    from privfair_cli.algorithms import causal, dpne
    from privfair_cli.privacy import correlated

    real_op, real_on, real_cc = (correlated.correlated_output_perturbation, dpne.objective_noise,
                                 dpne.cached_context)
    real_nct, real_ct = causal.noisy_contingency_table, causal.contingency
    state = {"m": None, "table": False}

    def output_perturbation(w, n, lam, kappa, eps, rng, ledger, note="", draws=1):
        before = len(ledger.entries) if ledger is not None else 0
        out = real_op(w, n, lam, kappa, eps, rng, ledger, note, draws)
        if ledger is None:
            trace.unaccounted += draws
        else:
            w = np.asarray(w, dtype=float)
            trace.own.append(OwnRelease("output", w.copy(), np.asarray(out, dtype=float) - w[None, :],
                                        list(ledger.entries[before:]), float(kappa)))
            trace.events.append(("own", len(trace.own) - 1))
        return out

    def cached_context(graph, k, h_norm):
        m, h = real_cc(graph, k, h_norm)
        state["m"] = m
        return m, h

    def objective_noise(n, k, eps, sensitivity, rng):
        noise = real_on(n, k, eps, sensitivity, rng)
        spent = [ev[1] for ev in trace.events if ev[0] == "spend"]
        entries = spent[-1:] if spent and spent[-1].mechanism == OBJECTIVE_PERTURBATION else []
        value = np.zeros(0) if state["m"] is None else np.asarray(state["m"], dtype=float)
        trace.own.append(OwnRelease("objective", value, np.asarray(noise, dtype=float).copy(), entries,
                                    norm_scale=2.0))
        trace.events.append(("own", len(trace.own) - 1))
        return noise

    def noisy_contingency_table(codes, cats, eps, rng, ledger, max_cells, occupied_only=False):
        state["table"] = not occupied_only  # the noise covers every cell: the draws follow the table's order
        try:
            return real_nct(codes, cats, eps, rng, ledger, max_cells, occupied_only)
        finally:
            state["table"] = False
            trace.query = None

    def contingency(*args, **kwargs):
        out = real_ct(*args, **kwargs)
        if state["table"]:
            trace.query, trace.query_pos = np.asarray(out, dtype=float).ravel().copy(), 0
        return out

    correlated.correlated_output_perturbation, dpne.objective_noise = output_perturbation, objective_noise
    dpne.cached_context, causal.noisy_contingency_table, causal.contingency = (cached_context,
                                                                               noisy_contingency_table, contingency)
    try:
        yield trace
    finally:
        correlated.correlated_output_perturbation, dpne.objective_noise = real_op, real_on
        dpne.cached_context, causal.noisy_contingency_table, causal.contingency = real_cc, real_nct, real_ct


def traced_fit(s: Setup, table, key: tuple, replay=None):
    """The plugin's own fit on `table` with a `Trace` seeded by `key` (replaying `replay`'s outputs if given)."""
    trace = Trace(key, replay, table.meta.get("row_id"))
    with observing(trace), observing_own(trace):
        plugin, ledger = fit(s, table, key, trace)
    final = getattr(plugin, "final", None)  # the correlated plugins' released feature set
    trace.columns = None if final is None else tuple(np.asarray(final).tolist())
    return plugin, ledger, trace


# ------------------------------------------------------------------------------------------ releases
@dataclass
class Release:
    """The draws (indices into the trace's log) between two ledger entries, and the entry that pays for them."""

    entry: object | None
    draws: list[int]


def paid_direct(trace: Trace) -> list[tuple]:
    """The trace's events without the direct draws that are not privacy noise: a direct draw counts only right
    after a ledger entry (no mechanism draw between) or right after a counted direct draw of the same kind and
    scale (a release drawn in chunks); any other (an initialisation, a shuffle's noise) is the plugin's own
    randomness and is left out, so a direct draw is never taken for a release outside the ledger."""
    kept, pending, last = [], False, None
    for ev in trace.events:
        if ev[0] == "spend":
            kept.append(ev)
            pending, last = True, None
            continue
        if ev[0] == "own":  # a Gamma-norm release, paid by the entries it made (`own_ledger_problems`)
            kept.append(ev)
            pending, last = False, None
            continue
        kind, _, scale, _, direct = trace.draws[ev[1]]
        if not direct:
            kept.append(ev)
            pending, last = False, None
            continue
        sig = (kind, tuple(np.unique(scale).tolist()))
        if pending or sig == last:
            kept.append(ev)
            pending, last = False, sig
    return kept


def releases(trace: Trace) -> tuple[list[Release], list[str]]:
    """The trace's releases, each with its entry, and the problems found (draws with no entry of their own)."""
    out, problems = [], []
    pending, current, prev_was_draw = None, None, False
    unpaid = []  # releases drawn before any entry: paid by the next entry (PATE-GAN spends after its votes)
    for ev in paid_direct(trace):
        if ev[0] == "own":  # its entries are its own: nothing after it is paid by them
            pending, prev_was_draw = None, False
            continue
        if ev[0] == "spend":
            pending = ev[1]
            if unpaid:
                for rel in unpaid:
                    rel.entry = pending
                unpaid, pending = [], None
            prev_was_draw = False
            continue
        k = ev[1]
        if prev_was_draw and current is not None:
            current.draws.append(k)
            continue
        current = Release(pending, [k])
        if pending is None:
            if out and out[-1].entry is not None:
                problems.append(f"draw {k} ({trace.draws[k][0]}) has no ledger entry of its own: a release outside "
                                f"the ledger")
            else:
                unpaid.append(current)
        out.append(current)
        pending, prev_was_draw = None, True
    for rel in unpaid:
        problems.append(f"draw {rel.draws[0]} ({trace.draws[rel.draws[0]][0]}) is never paid for by a ledger entry")
    for rel in out:
        kinds = {trace.draws[k][0] for k in rel.draws}
        scales = {float(np.unique(trace.draws[k][2])[0]) for k in rel.draws
                  if trace.draws[k][2] is not None and np.unique(trace.draws[k][2]).size == 1}
        if len(kinds) > 1 or len(scales) > 1:
            problems.append(f"draws {rel.draws[0]}..{rel.draws[-1]} mix {sorted(kinds)} noise of scales "
                            f"{sorted(scales)} under one entry ({rel.entry.mechanism if rel.entry else '-'}): "
                            "a release outside the ledger")
    return out, problems


def implied_scale(entry) -> float | None:
    """The noise scale (Laplace b, Gaussian sigma) the entry's (eps, delta, rho) and sensitivity imply, or None."""
    sens, name = entry.sensitivity, entry.mechanism
    if sens is None or name.endswith("heterogeneous"):
        return None
    if name in LAPLACE_ENTRIES and entry.eps > 0:
        return sens / entry.eps
    if name == "gaussian_classic":
        return mechanisms.gaussian_sigma_classic(sens, entry.eps, entry.delta)
    if name == "gaussian_analytic":
        return mechanisms.gaussian_sigma_analytic(sens, entry.eps, entry.delta)
    if name == "gaussian" and entry.rho:
        return sens / math.sqrt(2 * entry.rho)
    return None


def selection_eps(entry) -> float:
    """The eps of an exponential-mechanism entry: its own (pure), or sqrt(8 rho) (bounded range, zCDP)."""
    return entry.eps if entry.rho is None else math.sqrt(8 * entry.rho)


# ------------------------------------------------------------------------------------------ the checks
OUTPUT_PERTURBATION = "correlated_output_perturbation"


def own_ledger_problems(trace: Trace) -> list[str]:
    """An output perturbation must make one entry of its mechanism per draw, an objective perturbation one entry
    of its own for its noise term, each with the (eps, sensitivity) the calibration check reads."""
    out = []
    for k, rel in enumerate(trace.own):
        names = [e.mechanism for e in rel.entries]
        want, count = ((OUTPUT_PERTURBATION, len(rel.noise)) if rel.kind == "output"
                       else (OBJECTIVE_PERTURBATION, 1))
        what = "output perturbation" if rel.kind == "output" else "objective perturbation"
        if len(rel.entries) != count or any(n != want for n in names):
            out.append(f"{what} {k}: {len(rel.noise)} noise vectors released with {len(rel.entries)} entries "
                       f"({', '.join(names) or 'none'}; {count} {want} wanted): a release outside the ledger")
        elif any(e.sensitivity is None or not e.eps > 0 for e in rel.entries):
            out.append(f"{what} {k}: an entry without a sensitivity or eps")
    return out


def check_ledger(traces: list[Trace]) -> Check:
    problems, n_rel, n_draws = [], 0, 0
    for trace in traces:
        rels, p = releases(trace)
        problems += p + own_ledger_problems(trace)
        n_rel += len(rels) + len(trace.own)
        n_draws += sum(ev[0] == "draw" for ev in paid_direct(trace)) + sum(len(r.noise) for r in trace.own)
    if not n_draws:
        return Check("ledger", "skipped", "no draw through privfair's noise source (noise drawn elsewhere)")
    if problems:
        return Check("ledger", "fail", problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1
                                                      else ""), {"problems": len(problems)})
    return Check("ledger", "pass", f"{n_draws} draws in {n_rel} releases, each paid for by a ledger entry",
                 {"releases": n_rel, "draws": n_draws})


def independent_eps(ledger) -> dict:
    """(eps at the ledger's delta) of the entries composed by dp-accounting's PLD and RDP accountants and by the
    plain sum (basic composition); an accountant that cannot represent some entry is left out."""
    import logging

    from dp_accounting import (
        ComposedDpEvent,
        GaussianDpEvent,
        LaplaceDpEvent,
        PoissonSampledDpEvent,
        SelfComposedDpEvent,
        ZCDpEvent,
    )
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    logging.getLogger("absl").setLevel(logging.ERROR)  # dp-accounting's notes on orders it leaves out
    spent_eps, spent_delta = ledger.spent()
    delta = spent_delta if ledger.accountant == "basic" else ledger.budget.delta
    pld_events, rdp_events, total_eps, total_delta = [], [], 0.0, 0.0
    stated = False  # an entry's eps is the claim of the mechanism it states: its sum is no independent bound
    grid = 1e-4  # the PLD's loss grid, widened as privacy/dpsgd.py widens it for small multipliers
    for e in ledger.entries:
        if e.rdp is not None:  # DP-SGD's steps: the subsampled Gaussian it states in `extra`
            x = e.extra
            if e.mechanism != "subsampled_gaussian" or x.get("sampling", "poisson") != "poisson" or "q" not in x:
                pld_events = rdp_events = None
                total_eps = math.inf
                break
            ev = SelfComposedDpEvent(PoissonSampledDpEvent(x["q"], GaussianDpEvent(x["sigma"])), int(x["steps"]))
            total_eps = math.inf
        elif e.rho is not None:
            if e.mechanism == "gaussian":
                ev = GaussianDpEvent(1 / math.sqrt(2 * e.rho)) if e.rho > 0 else None
            else:
                ev = ZCDpEvent(e.rho) if e.rho > 0 else None
                pld_events = None  # a zCDP bound has no PLD in dp-accounting
            total_eps = math.inf
        elif e.delta > 0:
            total_eps, total_delta = total_eps + e.eps, total_delta + e.delta
            x = e.extra
            pld = x.get("accountant") == "pld" and x.get("sampling", "poisson") == "poisson" and "q" in x
            if not (pld and joint_multiplier(x["sigma"], x.get("sigma1")) > 0):
                pld_events = rdp_events = None  # an (eps, delta) entry composes by the sum only
                continue
            # a run charged as one entry by the PLD accountant (DP-SGD, DP-WGAN): the mechanism its `extra` states
            sigma, stated = joint_multiplier(x["sigma"], x.get("sigma1")), True
            grid = max(grid, PLD_DISCRETIZATION * max(1.0, sigma ** -2))
            ev = SelfComposedDpEvent(PoissonSampledDpEvent(x["q"], GaussianDpEvent(sigma)), int(x["steps"]))
        else:
            total_eps += e.eps
            ev = LaplaceDpEvent(1 / e.eps) if e.mechanism == "laplace" else ZCDpEvent(e.eps ** 2 / 2)
            if e.mechanism != "laplace":
                pld_events = None
        if ev is None:
            continue
        for events in (pld_events, rdp_events):
            if events is not None:
                events.append(ev)
    out = {"sum": total_eps if total_delta <= delta * (1 + REL_TOL) + 1e-15 else math.inf}
    if delta > 0:
        if pld_events:
            acc = PLDAccountant(value_discretization_interval=grid)
            acc.compose(ComposedDpEvent(pld_events))
            out["pld"] = float(acc.get_epsilon(delta))
        if rdp_events:
            orders = np.concatenate([np.linspace(1.01, 10, 200), np.arange(11, 257)])
            acc = RdpAccountant(list(orders))
            acc.compose(ComposedDpEvent(rdp_events))
            out["rdp"] = float(acc.get_epsilon(delta))
    if stated and len(out) > 1:
        del out["sum"]
    return out


def check_accounting(ledger) -> Check:
    """The ledger's claim against the smallest valid independent bound of its entries."""
    if not ledger.entries:
        return Check("accounting", "skipped", "no ledger entry")
    eps, delta = ledger.spent()
    ind = independent_eps(ledger)
    best_name = min(ind, key=ind.get)
    best = ind[best_name]
    figs = {"claimed_eps": eps, "claimed_delta": delta} | {f"eps_{k}": v for k, v in ind.items()}
    if math.isinf(best):
        return Check("accounting", "skipped", f"{len(ledger.entries)} entries that no independent accountant "
                     "represents", figs)
    if eps < best * (1 - ACCOUNTING_TOL) - 1e-9:
        return Check("accounting", "fail", f"the ledger claims eps={eps:.4g} at delta={delta:.3g}, but its "
                     f"{len(ledger.entries)} entries compose to eps={best:.4g} ({best_name}, dp-accounting)", figs)
    return Check("accounting", "pass", f"claimed eps={eps:.4g} >= {best:.4g} ({best_name}) for "
                 f"{len(ledger.entries)} entries", figs)


def _pit(kind: str, z: np.ndarray) -> np.ndarray:
    return stats.laplace.cdf(z) if kind == "laplace" else stats.norm.cdf(z)


def check_calibration(traces: list[Trace], rng: np.random.Generator) -> Check:
    """Scales against the entries, and the uniformity of the noise's probability integral transforms."""
    pits: dict[str, list[np.ndarray]] = {"laplace": [], "gaussian": [], "select": []}
    low, checked = [], 0
    sel = [0.0, 0.0]  # selections: sum of (logit chosen - its expectation), sum of variances
    for trace in traces:
        rels, _ = releases(trace)
        for rel in rels:
            want = None if rel.entry is None else implied_scale(rel.entry)
            for k in rel.draws:
                kind, v, scale, out, _ = trace.draws[k]
                if kind == "select":
                    p = np.exp(v - np.logaddexp.reduce(v[np.isfinite(v)])) if np.isfinite(v).any() else None
                    if p is None:
                        continue
                    order = np.argsort(v, kind="stable")
                    cdf = np.cumsum(p[order])
                    r = int(np.flatnonzero(order == out)[0])
                    pits["select"].append(np.array([cdf[r] - p[out] * (1 - rng.random())]))
                    u = np.where(np.isfinite(v), v, 0.0)
                    mean = float(np.sum(p * u))
                    sel[0] += u[out] - mean
                    sel[1] += float(np.sum(p * (u - mean) ** 2))
                    continue
                live = scale > 0
                if not live.any():
                    continue
                if want is not None:
                    checked += 1
                    if float(np.min(scale[live])) < want * (1 - REL_TOL):
                        low.append(f"{rel.entry.mechanism} ({rel.entry.note or 'release'}): noise scale "
                                   f"{float(np.min(scale[live])):.4g} below the {want:.4g} its entry implies")
                used = np.where(live, want if want is not None else scale, 1.0)
                z = ((np.asarray(out, dtype=float) - v) / used)[live].ravel()
                pits[kind].append(_pit(kind, z))
    for trace in traces:
        for kind, u in own_pits(trace).items():
            pits.setdefault(kind, []).append(u)
        checked += sum(len(r.entries) for r in trace.own)
    figs, worst = {}, None
    for kind, parts in pits.items():
        if not parts:
            continue
        u = np.concatenate(parts)
        if len(u) > MAX_PIT:
            u = rng.choice(u, MAX_PIT, replace=False)
        p = float(stats.kstest(u, "uniform").pvalue) if len(u) >= 20 else math.nan
        figs[f"{kind}_draws"], figs[f"{kind}_ks_p"] = len(u), p
        if kind in ("laplace", "gaussian"):
            figs[f"{kind}_std_ratio"] = float(np.std(_inverse(kind, u)) / (math.sqrt(2) if kind == "laplace"
                                                                          else 1.0))
        if p < PVALUE and (worst is None or p < worst[1]):
            worst = (kind, p, len(u))
    if sel[1] > 0 and figs.get("select_draws", 0) >= 50:
        # the chosen candidates' logits against their expectation under the claimed law: a selection sharper than
        # claimed (less noise) raises them; normal approximation of a sum of bounded independent terms
        z = sel[0] / math.sqrt(sel[1])
        p = float(2 * stats.norm.sf(abs(z)))
        figs["select_logit_z"], figs["select_logit_p"] = z, p
        if p < PVALUE and (worst is None or p < worst[1]):
            worst = ("select", p, figs["select_draws"])
    if not figs:
        return Check("calibration", "skipped", "no draw through privfair's noise source")
    if low:
        return Check("calibration", "fail", low[0] + (f" (and {len(low) - 1} more)" if len(low) > 1 else ""),
                     figs | {"scales_checked": checked})
    if worst:
        kind, p, n = worst
        what = {"select": "the exponential mechanism's choices", "gamma_norm": "the Gamma-norm noise norms",
                "direction": "the Gamma-norm noise directions"}.get(kind, f"the {kind} noise")
        return Check("calibration", "fail", f"{what} over {n} draws do not follow the claimed law "
                     f"({'z-test of the chosen logits' if kind == 'select' else 'Kolmogorov-Smirnov'} p = {p:.2g})",
                     figs | {"scales_checked": checked})
    return Check("calibration", "pass", f"{checked} scales as their entries imply; noise laws: "
                 + ", ".join(f"{k} p={figs[k + '_ks_p']:.2g} ({figs[k + '_draws']} draws)" for k in pits
                             if k + "_ks_p" in figs), figs | {"scales_checked": checked})


def own_pits(trace: Trace) -> dict[str, np.ndarray]:
    """The probability integral transforms of the Gamma-norm noise vectors of `trace.own` under the law their
    entry claims (density proportional to exp(-eps |b|_2 / (norm_scale sensitivity))): |b| ~ Gamma(d, norm_scale
    sensitivity / eps) (`gamma_norm`), and the direction uniform on the sphere, (u . b / |b|)^2 ~ Beta(1/2,
    (d - 1)/2) for a fixed unit vector u (`direction`). An objective perturbation's rows are
    many vectors of one release: at most `MAX_PIT` of them are kept."""
    norms, dirs = [], []
    for rel in trace.own:
        if not rel.entries or (rel.kind == "output" and len(rel.entries) != len(rel.noise)):
            continue
        noise = rel.noise
        d = noise.shape[1]
        entries = rel.entries if rel.kind == "output" else rel.entries * len(noise)
        r = np.linalg.norm(noise, axis=1)
        scale = np.array([rel.norm_scale * e.sensitivity / e.eps for e in entries])
        norms.append(stats.gamma.cdf(r, d, scale=scale))
        if d >= 2:  # u = the coordinate axis e_(i mod d) for vector i: fixed, so never drawn from a stream
            live = r > 0  # that could be the noise's own (a seed that is a prefix of the fit's is the same)
            cos = noise[live, np.arange(len(noise))[live] % d] / r[live]
            dirs.append(stats.beta.cdf(cos ** 2, 0.5, (d - 1) / 2))
    out = {}
    if norms:
        out["gamma_norm"] = np.concatenate(norms)
    if dirs:
        out["direction"] = np.concatenate(dirs)
    return out


def _inverse(kind: str, u: np.ndarray) -> np.ndarray:
    u = np.clip(u, 1e-12, 1 - 1e-12)
    return stats.laplace.ppf(u) if kind == "laplace" else stats.norm.ppf(u)


# ------------------------------------------------------------------------------------------ sensitivity
def corner_records(table, rng: np.random.Generator, count: int = 8) -> list[tuple[str, dict]]:
    """Canary records at corners of the declared bounds ([0, 1] features, each label and group, discrete codes at
    the rarest, the commonest or random codes of their declared domains)."""
    d = table.d
    labels = np.unique(table.y) if len(table.y) else np.array([0, 1])
    groups = np.unique(table.s) if table.s is not None and len(table.s) else np.array([None])

    def frame(how):
        if table.frame is None:
            return None
        out = {}
        for c in table.frame.columns:
            counts = np.bincount(table.frame[c].to_numpy(int), minlength=table.domain.get(c, 1))
            out[c] = int(np.argmin(counts) if how == "rare" else np.argmax(counts) if how == "common"
                         else rng.integers(len(counts)))
        return out

    def labelled(codes, y):  # the discrete view's outcome column carries the label (code 1 = positive)
        if codes is not None and outcome(table) in codes:
            codes[outcome(table)] = int(y)
        return codes

    xs = [("ones", np.ones(d)), ("zeros", np.zeros(d))]
    for j in rng.choice(d, size=min(2, d), replace=False) if d else []:
        xs.append((f"e{j}", np.eye(d)[j]))
    while len(xs) < count:
        xs.append(("random corner", (rng.random(d) < 0.5).astype(float)))
    out = []
    for i, (name, x) in enumerate(xs[:count]):
        y, s = labels[i % len(labels)], groups[(i // len(labels)) % len(groups)]
        how = ("rare", "common", "random")[i % 3]
        out.append((f"x={name}, y={y}" + ("" if s is None else f", s={s}") + f", {how} codes",
                    {"X": x, "y": y, "s": s, "frame": labelled(frame(how), y)}))
    return out


def outcome(table) -> str | None:
    """The discrete view's outcome column (the card's `roles.outcome`), if any."""
    names = [c for c in (table.roles or {}).get("outcome") or [] if table.frame is not None and c in table.frame]
    return names[0] if names else None


def edge_neighbours(table, rng: np.random.Generator, count: int = 3) -> list[tuple]:
    """Edge-level neighbours of a network (its privacy unit): D and D plus an edge (between the two lowest-degree
    vertices not adjacent, two isolated vertices if any, two vertices of degree 1, the two highest-degree ones not
    adjacent, random pairs) and D and D without an edge (of the highest degree sum, one whose removal leaves a
    vertex of degree 1 isolated, random ones)."""
    from privfair_cli.tools.audit.canaries import graph_canary, with_edge

    graph = table.meta["graph"]
    adj = graph.adjacency
    degree = np.asarray(adj.sum(axis=1)).ravel()
    edges = graph.edges()
    added, removed = [("lowest-degree pair", graph_canary(graph, "extreme"))], [
        ("highest degree sum", graph_canary(graph, "row"))]

    def non_adjacent(pool, tries=50):
        pool = np.asarray(pool)
        for _ in range(tries if len(pool) >= 2 else 0):
            u, v = (int(x) for x in rng.choice(pool, 2, replace=False))
            if not adj[u, v]:
                return u, v
        return None

    for name, pool in (("isolated pair", np.flatnonzero(degree == 0)), ("degree-1 pair", np.flatnonzero(degree == 1)),
                       ("highest-degree pair", np.argsort(-degree, kind="stable")[:10])):
        pair = non_adjacent(pool)
        if pair is not None:
            added.append((name, pair))
    for _ in range(count):
        pair = non_adjacent(np.arange(graph.n))
        if pair is not None:
            added.append(("random pair", pair))
    leaf = [e for e in edges if min(degree[e[0]], degree[e[1]]) == 1]
    if leaf:
        e = leaf[int(rng.integers(len(leaf)))]
        removed.append(("an edge at a degree-1 vertex", (int(e[0]), int(e[1]))))
    for i in rng.choice(len(edges), size=min(count, len(edges)), replace=False) if len(edges) else []:
        removed.append(("random edge", (int(edges[i][0]), int(edges[i][1]))))
    pairs = [(f"D + edge {u}-{v} ({name})", table, with_edge(table, (u, v), True)) for name, (u, v) in added]
    pairs += [(f"D - edge {u}-{v} ({name})", table, with_edge(table, (u, v), False)) for name, (u, v) in removed]
    return pairs


def domain_corner_neighbours(table, rng: np.random.Generator, halves: int = 2) -> list[tuple]:
    """Adversarial D of the discrete view's declared domain: every record the corner a of the code box (the
    largest code on a set A of attributes, code 0 on the rest), and the canary the opposite corner. A statistic
    of second moments (a covariance) moves most when D sits at one corner and the canary at the other, which the
    audited data, spread over the box, never show. A = every attribute, and `halves` random halves. The label
    follows the outcome attribute where the card has one."""
    if table.frame is None or not table.domain or not len(table.frame.columns):
        return []
    cols = list(table.frame.columns)
    top = np.array([max(int(table.domain.get(c, 1)) - 1, 0) for c in cols])
    col = outcome(table)
    sets = [np.ones(len(cols), bool)] + [rng.random(len(cols)) < 0.5 for _ in range(halves)]
    pairs = []
    for A in sets:
        a, b = np.where(A, top, 0), np.where(A, 0, top)
        frame = table.frame.copy()
        frame.loc[:, cols] = np.tile(a, (len(frame), 1))
        frame = frame.astype(table.frame.dtypes)
        y = table.y if col is None else np.full_like(table.y, a[cols.index(col)])
        hom = dataclasses.replace(table, frame=frame, y=y)
        rec = {"X": table.X[0] if len(table.X) else np.zeros(table.d),
               "y": table.y[0] if col is None else b[cols.index(col)],
               "s": None if table.s is None else table.s[0], "frame": dict(zip(cols, b.tolist(), strict=True))}
        name = "every attribute" if A.all() else f"{int(A.sum())} of {len(cols)} attributes"
        pairs.append((f"D with every record at the domain's corner (largest code on {name}), + the opposite "
                      "corner", hom, with_records(hom, [rec])))
    return pairs


def neighbours(s: Setup, rng: np.random.Generator, corners: int = 8, removed: int = 3) -> list[tuple]:
    """(description, D_a, D_b) pairs of neighbours of the audited D: D and D + a corner record; D and D without a
    record; for `REPLACE_ONE` algorithms, D with a row replaced by one corner record and by another. On a network
    the neighbours differ by one edge (`edge_neighbours`)."""
    table = s.table
    if "graph" in table.meta:
        return edge_neighbours(table, rng)
    recs = corner_records(table, rng, corners)
    pairs = [(f"D + [{name}]", table, with_records(table, [rec])) for name, rec in recs]
    n = len(table)
    far = int(np.argmax(np.abs(table.X - table.X.mean(axis=0)).sum(axis=1))) if table.X.size else 0
    rows = list(dict.fromkeys([far] + [int(r) for r in rng.choice(n, size=min(removed, n), replace=False)]))
    for r in rows[:removed]:
        pairs.append((f"D - row {r}", table, table.subset(np.delete(np.arange(n), r))))
    if table.s is not None and len(table.y) and table.d:
        # adversarial D of the card's domain: every label and group set to one value, and the canary of the other
        # label and group with every feature at 1 (moves the group mean and every per-row term the most)
        for y0 in (0, 1):
            for s0 in (0, 1):
                hom = dataclasses.replace(table, y=np.full_like(table.y, y0), s=np.full_like(table.s, s0))
                col = outcome(table)
                if col is not None:
                    hom = dataclasses.replace(hom, frame=hom.frame.assign(**{col: y0}).astype(table.frame.dtypes))
                codes = None if recs[0][1]["frame"] is None else dict(recs[0][1]["frame"])
                if col is not None:
                    codes[col] = 1 - y0
                rec = {"X": np.ones(table.d), "y": 1 - y0, "s": 1 - s0, "frame": codes}
                pairs.append((f"D with y={y0}, s={s0} everywhere, + [x=ones, y={1 - y0}, s={1 - s0}]", hom,
                              with_records(hom, [rec])))
    pairs += domain_corner_neighbours(table, rng)
    if s.rc.algo in REPLACE_ONE:
        base = table.subset(np.delete(np.arange(n), far))
        for (na, ra), (nb, rb) in zip(recs[::2], recs[1::2], strict=False):
            pairs.append((f"row {far} replaced by [{na}] vs by [{nb}]", with_records(base, [ra]),
                          with_records(base, [rb])))
        pairs.append((f"row {far} replaced by [{recs[0][0]}] vs by [{recs[-1][0]}]",
                      with_records(base, [recs[0][1]]), with_records(base, [recs[-1][1]])))
    return pairs


def release_change(entry, kind: str, scale, dv: np.ndarray, v) -> tuple[float, float, str]:
    """(observed, declared, what) of one release whose value before noise moved by `dv` between neighbours."""
    if kind == "select":
        eps = selection_eps(entry)
        finite = np.isfinite(dv)
        moved = float(np.max(np.abs(dv[finite]))) if finite.any() else 0.0
        sens = entry.sensitivity if entry.sensitivity is not None else 1.0
        return moved * 2 * sens / eps, sens, "largest score change (from the logits)"
    if entry.mechanism.endswith("heterogeneous"):
        live = scale > 0
        if kind == "laplace":
            return float(np.sum(np.abs(dv[live]) / scale[live])), entry.eps, "privacy loss sum |change| / scale"
        r = float(np.linalg.norm(dv[live] / scale[live]))
        exact = mechanisms._analytic_delta(1.0, r, entry.eps) if r > 0 else 0.0
        return exact, entry.delta, "exact Gaussian delta at the observed change"
    if kind == "laplace":
        return float(np.sum(np.abs(dv))), entry.sensitivity, "L1 change"
    return float(np.linalg.norm(dv)), entry.sensitivity, "L2 change"


def has_values(trace: Trace) -> bool:
    """Whether the trace holds a release whose value before noise is known: a mechanism's draw, an observed
    Gamma-norm release, or a direct draw whose query was observed."""
    return bool(trace.log or trace.own or any(d[4] == "known" for d in trace.draws))


def check_sensitivity(s: Setup, pairs: list[tuple], key: tuple) -> Check:
    """Every release's query on each neighbouring pair (replayed with the same noise) against its entry."""
    worst: dict[str, tuple] = {}
    diverged, compared, other_columns = [], 0, 0
    for desc, da, db in pairs:
        try:
            _, _, primary = traced_fit(s, da, key)
        except PrivfairError as err:
            diverged.append(f"{desc}: refused ({err})")
            continue
        if not has_values(primary):
            return Check("sensitivity", "skipped", "no draw through privfair's noise source")
        try:
            _, _, shadow = traced_fit(s, db, key, replay=primary.log)
        except (Diverged, PrivfairError) as err:
            diverged.append(f"{desc}: {err}")
            continue
        if len(shadow.log) != len(primary.log):
            diverged.append(f"{desc}: the neighbouring fits made different numbers of releases")
            continue
        compared += 1
        for ra, rb in zip(primary.own, shadow.own, strict=False):
            if not ra.entries or not ra.value.size:
                continue
            if primary.columns != shadow.columns or ra.value.shape != rb.value.shape:
                other_columns += 1  # the non-private feature preparation chose another set: another query
                continue
            e = ra.entries[0]
            change = float(np.linalg.norm(rb.value - ra.value))
            if ra.kind == "output":  # held to the per-record bound 2 / (n lam) its kappa >= 1 multiplies
                obs = (change, e.sensitivity / max(ra.kappa, 1.0), f"L2 change of the weights (against 2 / (n lam) "
                       f"= the declared {e.sensitivity:.4g} / kappa {ra.kappa:.4g})")
            else:
                obs = (change, e.sensitivity, "L2 (Frobenius) change of the walk matrix M (Lemma 1)")
            label = f"{e.mechanism}: {e.note}".split(" (")[0] if e.note else e.mechanism
            if label not in worst or obs[0] / max(obs[1], 1e-300) > worst[label][0] / max(worst[label][1], 1e-300):
                worst[label] = (obs[0], obs[1], obs[2], desc)
        rels, _ = releases(primary)
        for rel in rels:
            e = rel.entry
            if e is None or (e.sensitivity is None and not e.mechanism.endswith("heterogeneous")
                             and primary.draws[rel.draws[0]][0] != "select"):
                continue
            kind = primary.draws[rel.draws[0]][0]
            if any(primary.draws[k][4] is True for k in rel.draws) or len(shadow.draws) != len(primary.draws):
                continue  # a direct draw's value is unknown
            if kind == "select":
                obs_list = [release_change(e, kind, None, shadow.draws[k][1] - primary.draws[k][1], None)
                            for k in rel.draws]
                obs = max(obs_list, key=lambda t: t[0])
            else:
                dv = np.concatenate([np.ravel(shadow.draws[k][1] - primary.draws[k][1]) for k in rel.draws])
                sc = np.concatenate([np.ravel(primary.draws[k][2]) for k in rel.draws])
                obs = release_change(e, kind, sc, dv, None)
            name = f"{e.mechanism}: {e.note}" if e.note else e.mechanism
            label = name.split(" round ")[0].split(" node ")[0]
            if label not in worst or obs[0] / max(obs[1], 1e-300) > worst[label][0] / max(worst[label][1], 1e-300):
                worst[label] = (obs[0], obs[1], obs[2], desc)
    figs = {"neighbours": len(pairs), "compared": compared, "diverged": len(diverged)}
    if other_columns:
        figs["other_feature_set"] = other_columns
    if not compared:
        return Check("sensitivity", "skipped", "no neighbour could be replayed: " + (diverged[0] if diverged
                                                                                     else "no release"), figs)
    bad = [(label, w) for label, w in worst.items() if w[0] > w[1] * (1 + REL_TOL) + 1e-12]
    figs["releases"] = {label: {"observed": w[0], "declared": w[1], "what": w[2], "neighbour": w[3]}
                        for label, w in worst.items()}
    if bad:
        label, (o, d_, what, desc) = max(bad, key=lambda t: t[1][0] / max(t[1][1], 1e-300))
        return Check("sensitivity", "fail", f"{label}: {what} {o:.4g} > declared {d_:.4g} on the neighbour "
                     f"{desc}", figs)
    ratio = max((w[0] / w[1] for w in worst.values() if w[1] > 0), default=0.0)
    if not worst:
        return Check("sensitivity", "skipped", f"no release comparable on the {compared} neighbours replayed"
                     + (f" ({other_columns} released on another feature set)" if other_columns else ""), figs)
    return Check("sensitivity", "pass", f"{len(worst)} kinds of release on {compared} neighbours; largest change "
                 f"{ratio:.3g} of the declared sensitivity" + (f" ({len(diverged)} neighbours not replayable)"
                                                               if diverged else "")
                 + (f" ({other_columns} output perturbations on another feature set, not comparable)"
                    if other_columns else ""), figs | {"largest_ratio": ratio})


# ------------------------------------------------------------------------------------------ all of them
def whitebox(s: Setup, opts: dict, progress) -> list[Check]:
    """The white-box checks of one configuration: `audit.whitebox_fits` traced fits on D (ledger, accounting,
    calibration) and the sensitivity search over neighbours."""
    from privfair_cli.tools.audit import sgd

    seed = opts["seed"]
    # the checks' own draws (neighbours, randomised transforms, subsets): a key of their own, since a seed
    # sequence ignores trailing zeros and [seed, 46] would be the first traced fit's (seed, 46, 0) noise stream
    rng = np.random.default_rng([seed, 50])
    if sgd.applies(s):
        progress("white-box DP-SGD checks")
        return sgd.checks(s, opts)
    traces, ledgers = [], []
    for t in range(opts["whitebox_fits"]):
        _, ledger, trace = traced_fit(s, s.table, (seed, 46, t))
        traces.append(trace)
        ledgers.append(ledger)
        if not trace.draws and not trace.own and t == 0:
            break
    progress(f"white-box checks on {len(traces)} traced fits")
    out = [check_ledger(traces), check_accounting(ledgers[0]), check_calibration(traces, rng)]
    if has_values(traces[0]):
        progress("sensitivity search over neighbours")
        out.append(check_sensitivity(s, neighbours(s, rng), (seed, 47)))
    else:
        out.append(Check("sensitivity", "skipped", "no release through privfair's mechanisms (a value before noise "
                         "to compare)"))
    return out
