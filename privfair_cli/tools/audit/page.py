"""docs/audit.md: the rendering of `results/audit/summary.json` (`suite.collect`), the suite's table of claimed
against measured eps and the control table, between the page's fixed text."""

from __future__ import annotations

from pathlib import Path

from privfair_cli.tools import tables
from privfair_cli.tools.audit.suite import SUITE_TRIALS

DOC = Path("docs/audit.md")


def table_md(rows: list[dict]) -> str:
    """The docs table: one row per audited algorithm (a not-run one with its reason)."""
    head = ["algorithm", "data", "guarantee", "claimed eps", "delta", "audit (view)", "trials / canaries",
            "empirical eps lower bound", "lower bound / claim", "white-box checks", "verdict", "seconds"]
    cells = []
    for r in rows:
        if r["verdict"] == "not_run":
            cells.append([r["algo"], r["data"], "", "", "", "", "", "", "", "", f"not run: {r['reason']}", ""])
            continue
        ratio = r["eps_lb"] / r["eps_claimed"] if r["eps_claimed"] else 0.0
        cells.append([r["algo"], r["data"], r["guarantee"], f"{r['eps_claimed']:.4g}", f"{r['delta_claimed']:.3g}",
                      f"{r['mode']} ({r.get('view', '-')})", r.get("trials") or r.get("canaries"),
                      f"{r['eps_lb']:.3f}", f"{ratio:.2f}", whitebox_cell(r.get("whitebox")), r["verdict"],
                      r.get("seconds", "")])
    return tables.table(head, cells)


def whitebox_cell(checks: dict | None) -> str:
    """`pass` names of the checks that ran: e.g. `4/4 pass`, or the failed ones."""
    if not checks:
        return "not run"
    ran = {k: v for k, v in checks.items() if v != "skipped"}
    failed = [k for k, v in ran.items() if v == "fail"]
    if failed:
        return "fail: " + ", ".join(failed)
    skipped = [k for k, v in checks.items() if v == "skipped"]
    return f"{len(ran)}/{len(ran)} pass" + (f" ({', '.join(skipped)} skipped)" if skipped else "")


def mutant_md(rows: list[dict]) -> str:
    """The mutant catalogue against the audit's verdicts (`make audit-mutants`)."""
    return tables.table(["mutant", "bug", "configuration", "expected to be flagged by", "verdict", "flagged by",
                         "in make test", "seconds"],
                        [[r["mutant"], r["bug"], f"`{r['config']}`", r["expect"], r["verdict"],
                          ", ".join(r["flagged_by"]) or "-", "yes" if r["fast"] else "slow", r["seconds"]]
                         for r in rows])


def render_doc(summary: dict) -> str:
    head = (DOC_HEAD.strip() + "\n\n")
    total = (f"\nTotal audit time {summary['seconds']:.0f} s (the sum of the rows, each timed on the machine "
             "and at the load where it last ran).\n")
    mech = tables.table(["mechanism (claim eps = 1)", "delta", "trials", "empirical eps lower bound", "verdict"],
                        [[r["mechanism"], f"{r['delta']:g}", r["trials"], f"{r['eps_lb']:.3f}", r["verdict"]]
                         for r in summary["mechanisms"]])
    mutants = summary.get("mutants") or []
    mut = (MUTANT_HEAD.strip() + "\n\n" + (mutant_md(mutants).strip() if mutants else
                                             "Not run yet (make audit-mutants).")
           + "\n\n" + MUTANT_TAIL.strip() + "\n\n")
    return (head + table_md(summary["rows"]) + total + "\n" + DOC_TAIL.strip() + "\n\n" + WHITEBOX.strip()
            + "\n\n" + mut + MECH_HEAD.strip() + "\n\n" + mech)


WHITEBOX = """
## White-box release checks: what a pass does and does not show

Beside the bound, every audit runs the white-box checks of `privfair_cli/tools/audit/whitebox.py` (and `sgd.py`
for DP-SGD) on 30 traced fits and a search over neighbours; any failed check fails the audit, whatever the bound.

- `ledger`: every noise draw of privfair's noise source (its mechanisms, and Laplace or Gaussian noise a plugin
  takes from the generator itself, like lapmech's table) is paid for by its own ledger entry. A pass does not
  cover noise drawn with other samplers (the correlated mechanisms' Gamma-norm output perturbation, DP-SGD's
  torch noise, checked by `sgd`): those releases are not seen.
- `accounting`: the ledger's (eps, delta) is at least the composition of its entries by dp-accounting's PLD or RDP
  accountant, or by the sum of their eps. It checks the arithmetic of composition, not that each entry is right.
- `calibration`: each draw's scale is at least what its entry implies, and the noise actually added follows the
  claimed Laplace or Gaussian law (Kolmogorov-Smirnov), the exponential mechanism's choices its softmax (a z-test
  of the chosen logits); p < 1e-6 fails. It checks that the noise matches the entry, not that the entry's
  sensitivity is right.
- `sensitivity`: each release's query before noise, on D and on neighbours replayed with the same noise (corner
  canaries added, rows removed, an adversarial D with one label and group everywhere, and replace-one pairs for
  the functional mechanism family), never moves by more than the declared sensitivity in the mechanism's norm.
  A pass is evidence on the neighbours searched, not a proof over all of them; a fail is a proof (the neighbour
  is printed).
- DP-SGD (`dpsgd_clipping`, `dpsgd_noise`, `dpsgd_batches`): per-example clipped norms <= C, the noise of every
  step / C ~ N(0, sigma^2) with the ledger's sigma, and Binomial(n, q) batch sizes under the Poisson accountant.
  A pass does not check the per-example gradients themselves (only their norms and clip factors) nor the noisy
  group counts of DPSGD-F and Naive. `dpsgd_one_run` is the white-box one-run audit with Dirac gradient canaries
  (one per parameter, scored on the released noisy sums less the known clipped sum): on compas's 12-parameter
  model it has 12 canaries and says nothing; on 300 MNIST rows (7850 parameters, 7800 canaries, full batches, 10
  steps) it reaches eps >= 1.53 at a claim of 4 (0.38 of the claim; the PLD composition of the same steps is
  tighter than the claim's RDP conversion), and with the noise removed it refutes the claim
  (tests/test_audit_mutants.py, slow).

By algorithm: the functional mechanisms (privlr, pflr, pflr_star, pdfc, adfc, relaxed_fm) and MST, PreFair and
PFDR, crfs, dpm, ffpdg and ron_gauss release through the mechanisms, so all four checks apply; lapmech and dpne
draw their noise from the generator after paying for it (ledger, accounting and calibration apply, not
sensitivity: the value before noise is not seen); cdp_zhu and cdp_group draw Gamma-norm noise, so only
`accounting` applies; privpc's selection scores move by more than their declared sensitivity 1 (its guarantee is
`heuristic` for that reason: the greedy score's sensitivity is unproven). Lower bound / claim is the tightness of
the bound alone: near 0 means the statistical test says nothing at these trials, not that the claim is tight.
"""

MUTANT_HEAD = """
## The mutant catalogue: deliberately broken code the audit must flag

Each mutant (`privfair_cli/tools/audit/mutants.py`) patches one function for the duration of one audit (no
algorithm is edited) and is audited with the white-box checks at their defaults and 20 trials of the bound; the
same configurations without a bug follow. `make audit-mutants` writes this table; the mutants marked `yes` run in
`make test` (tests/test_audit_mutants.py), the others with `-m slow`.
"""

MUTANT_TAIL = """
PrivPC without a bug fails too: its selection scores move by more than the declared sensitivity (above), a true
finding on an algorithm labelled `heuristic`; its mutant is flagged with a change twice as large.
"""


MECH_HEAD = """
## Controls: the mechanisms, correct and broken, and how tight the bound can be

The same test on the mechanisms of `privfair_cli.privacy` releasing a count that the canary moves by 1, correct
and with a deliberate bug (the sensitivity it is told halved, or its noise divided by 10), at the default 1000
trials (seed 0); randomised response, whose answer is known, also at 200,000. The Gaussian's halved sensitivity
(true eps about 2.2 at delta = 1e-5) is not caught by the threshold test at 1000 trials: its extra loss lies in
tails of probability near delta. The rows at 10,000 trials measure tightness on single releases: the threshold
test on the Laplace mechanism, and for the Gaussian the parametric bound of Gaussian differential privacy (the
difference of the two output means over their standard deviation, with confidence, turned into eps at delta;
valid where the release is Gaussian, which the white-box calibration check verifies for privfair's Gaussian
releases), which also catches the halved sensitivity.
"""


DOC_HEAD = """
# Privacy audit: claimed eps against an empirical lower bound

<!-- generated by `make audit` (python -m privfair_cli.tools.audit --all) from results/audit/*/row.json; do not edit -->

`privfair audit algo=A data=D eps=E` runs an algorithm's own fit many times on two add/remove neighbours (D, and
D plus one canary record at the extreme of the card's declared bounds; on a network, one canary edge) with
independent noise, and turns the best threshold test on a statistic of each run into a lower bound on eps with
Clopper-Pearson confidence (99 %), the threshold chosen on half of the trials and measured on the other half.
The statistic is the exact log-likelihood ratio of the noisy releases where every release goes through
privfair's mechanisms (view `release`), else a statistic of the output (view `output`). DP-SGD-style training is
audited in one training run with many canaries (`one_run`, Steinke, Nasr and Jagielski 2023). A lower bound
above the claim refutes the claim (exit status 1). A lower bound far below the claim is no evidence of
tightness: the canary and the statistic may be weak. Method and options: `privfair_cli/tools/audit/`;
docs/privacy.md.

Every registered private algorithm at eps = 1 on 300 rows (vertices for networks): classifiers and generators on
compas, graph learners on adult_pc, embeddings on a 300-vertex breadth-first subgraph of cora; """ + \
    ", ".join(f"{k} {v} trials" for k, v in SUITE_TRIALS.items()) + """ per neighbour; DP-SGD one run with 1000
canaries.
"""

DOC_TAIL = """
Reading the table: `pass` = no evidence against the claim at 99 % confidence and every white-box check passed
(or had nothing to check); `fail` = the claim is refuted by the bound or a white-box check failed.
Algorithms whose guarantee is `heuristic` are audited like the others; their claim is the eps their ledger records.
A `fail` there confirms what the `heuristic` label says: FFPDG's pre-processor reweights and resamples the raw
records before RON-Gauss, so one record moves the generator's second moments by more than RON-Gauss's sensitivity
(the white-box sensitivity check prints the neighbour); PrivPC's greedy selection scores move by more than their
declared sensitivity 1. `make audit` exits non-zero only when an `eps-DP`, `(eps,delta)-DP` or `zCDP` claim is
refuted. Neighbouring fits share every random draw but the canary's: per-row draws (RON-Gauss's white noise,
FFPDG's resampling) are keyed by record in an audit, so adding the canary no longer shifts the projection and the
noise of the other rows (which made RON-Gauss's rigorous variant read eps >= 1.93 against its claim of 1).
Why most bounds are 0 at these trial counts: the functional mechanism spreads its L1 sensitivity over d + d^2
coefficients, so one record moves each by a small fraction of its noise and the likelihood ratio of a whole release
stays near 0 except in tails that a few hundred trials do not reach (the test of `tests/test_audit.py` on a
2-feature table shows it spans exactly [-eps/2, eps/2] for privlr: the canary moves the coefficients by half the
replace-one sensitivity). A noise scale divided by 10 is caught by the bound at the default 1000 trials on that
2-feature table (tests/test_audit.py), not on compas; on every table a halved noise or sensitivity is caught by the
white-box checks (the mutant catalogue below).
The graph learners and embeddings are audited with few trials: their bounds say only that nothing gross leaks.
The one-run audit with input-space canaries needs a model that can memorise them: a logistic model of d weights
tells apart at most about d canaries. At eps = 1 its bound is 0, as expected, which is no reassurance; with the noise
nearly off (eps = 1e7, german's 57 features, 200 canaries) the same audit finds a positive bound
(`test_one_run_audit_has_power_when_the_model_memorises`, a slow test).
"""
