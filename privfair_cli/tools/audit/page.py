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


def tightness_md(summary: dict) -> str:
    """The tightness table: the single-release controls at 10,000 trials and DP-SGD's white-box one-run audit."""
    from privfair_cli.tools.audit.controls import TIGHT_TRIALS

    cells = []
    for r in summary["mechanisms"]:
        if r["trials"] == TIGHT_TRIALS and "halved" not in r["mechanism"]:
            test = "GDP bound" if "GDP" in r["mechanism"] else "threshold test"
            cells.append([r["mechanism"].replace(", GDP bound", ""), test, "1", f"{r['eps_lb']:.3f}",
                          f"{r['eps_lb']:.2f}", "-", f"{r['trials']} trials per neighbour", r["verdict"]])
    for r in summary.get("one_run") or []:
        if r["verdict"] == "not_run":
            cells.append([f"DP-SGD, {r['name']}", "white-box one run", "-", "-", "-", "-", "-",
                          f"not run: {r['reason']}"])
            continue
        cells.append([f"DP-SGD, {r['name']} (`{r['config']}`)", "white-box one run (f-DP)",
                      f"{r['eps_claimed']:.4g}", f"{r['eps_lb']:.3f}", f"{r['ratio']:.2f}",
                      f"{r['eps_exact']:.4g} ({r['ratio_exact']:.2f})",
                      f"one run, {r['canaries']} canaries, {r['correct']} of {r['guesses']} guesses right",
                      r["verdict"]])
    return tables.table(["release", "test", "claimed eps", "empirical eps lower bound", "lower bound / claim",
                         "exact eps of the stated mechanism (bound / it)", "trials", "verdict"], cells)


def algorithms_md(rows: list[dict]) -> str:
    """Per algorithm: what its releases are, how the checks see them, what a pass shows and does not show."""
    cells = []
    for r in rows:
        note = ALGO_NOTES.get(r["algo"])
        if note is None:
            continue
        releases, shows, not_shown = note
        cells.append([r["algo"], whitebox_cell(r.get("whitebox")), releases, shows, not_shown])
    return tables.table(["algorithm", "white-box checks", "its releases, and how the checks see them",
                         "a pass (or the failure) shows", "a pass does not show"], cells)


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
    tight = TIGHT_HEAD.strip() + "\n\n" + tightness_md(summary) + "\n" + TIGHT_TAIL.strip() + "\n\n"
    algos = ALGO_HEAD.strip() + "\n\n" + algorithms_md(summary["rows"]) + "\n"
    return (head + table_md(summary["rows"]) + total + "\n" + DOC_TAIL.strip() + "\n\n" + tight
            + WHITEBOX.strip() + "\n\n" + algos + "\n" + mut + MECH_HEAD.strip() + "\n\n" + mech)


WHITEBOX = """
## White-box release checks: what a pass does and does not show

Beside the bound, every audit runs the white-box checks of `privfair_cli/tools/audit/whitebox.py` (and `sgd.py`
for DP-SGD) on 30 traced fits and a search over neighbours; any failed check fails the audit, whatever the bound.
Releases are seen where they are made: the noise source's mechanisms (Laplace, Gaussian, exponential), Laplace or
Gaussian noise a plugin draws from the generator right after paying for it, and, observed at their functions for
the length of an audit (no algorithm is edited), the releases whose noise has another law: the correlated
plugins' output perturbation and DPNE's objective perturbation (Gamma-norm noise vectors), lapmech's contingency
table (its value before noise), DP-SGD's noisy gradient sums (inside the trainer).

- `ledger`: every noise draw is paid for by its own ledger entry (an output perturbation by one entry per draw, an
  objective perturbation by one for its noise term). A pass does not cover noise drawn by a sampler none of these
  observe; crfs's Step 5 evaluations, drawn with no ledger at all, are counted, not checked.
- `accounting`: the ledger's (eps, delta) is at least the composition of its entries by dp-accounting's PLD or RDP
  accountant, or by the sum of their eps. It checks the arithmetic of composition, not that each entry is right.
- `calibration`: each draw's scale is at least what its entry implies, and the noise actually added follows the
  claimed law: Laplace or Gaussian (Kolmogorov-Smirnov on the probability integral transforms), the exponential
  mechanism's choices its softmax (a z-test of the chosen logits), a Gamma-norm vector's norm Gamma(d, scale) and
  its direction uniform on the sphere; p < 1e-6 fails. It checks that the noise matches the entry, not that the
  entry's sensitivity is right.
- `sensitivity`: each release's query before noise, on D and on neighbours replayed with the same noise, never
  moves by more than the declared sensitivity in the mechanism's norm. The neighbours: corner canaries added and
  rows removed; an adversarial D with one label and group everywhere; a D whose records all sit at one corner of
  the discrete view's code box, with the canary at the opposite corner (statistics of second moments move most
  there); replace-one pairs where the sensitivity is stated for them; on a network, edges added (between the
  lowest-degree vertices, vertices of degree 1, the highest-degree ones, random pairs) and removed. A pass is
  evidence on the neighbours searched, not a proof over all of them; a fail is a proof (the neighbour is printed).
- DP-SGD (`dpsgd_clipping`, `dpsgd_noise`, `dpsgd_batches`): per-example clipped norms <= C, the noise of every
  step / C ~ N(0, sigma^2) with the ledger's sigma, and Binomial(n, q) batch sizes under the Poisson accountant.
  A pass does not check the per-example gradients themselves (only their norms and clip factors) nor the noisy
  group counts of DPSGD-F and Naive. `dpsgd_one_run` is the white-box one-run audit with Dirac gradient canaries
  (above, "Tightness"); it needs a model of at least 100 parameters, so on compas's 12-parameter model it is
  skipped and the suite's DP-SGD rows rest on the other checks.
"""

ALGO_HEAD = """
### By algorithm

The white-box column is the suite's (the table at the top). A `fail` on an algorithm labelled `heuristic` is the
reason for the label, found again by the audit.
"""

FM = ("noise on the coefficients of the loss's polynomial expansion (functional mechanism), through the "
      "mechanisms")
FM_SHOWS = ("every draw paid for and of the entry's law; the coefficients move by at most their declared "
            "sensitivity on every neighbour searched, replace-one pairs included")
FM_NOT = ("that the declared sensitivity bounds every neighbour (a search, not a proof); the minimisation of the "
          "noisy polynomial is post-processing, not checked")
CDP = ("output perturbation of a regularised ERM: weights + a Gamma-norm vector (density exp(-eps |b| / "
       "Delta_2), Delta_2 = 2 kappa / (n lam)), observed at its function")
CDP_SHOWS = ("one entry per draw; the noise's norms Gamma(d, Delta_2 / eps) and directions uniform; the weights "
             "move by at most 2 / (n lam), the per-record bound kappa multiplies, on the neighbours whose "
             "non-private feature preparation keeps the same features")
CDP_NOT = ("anything about Theta and kappa, read off the data (why heuristic), nor the correlated neighbours "
           "(a record and the records correlated with it changing together) the kappa is for; neighbours whose "
           "preparation picks other features are not compared")
SGD = "noisy clipped gradient sums drawn with torch, observed inside the trainer (`sgd`)"
SGD_SHOWS = ("clipping at C, noise N(0, sigma^2 C^2) at the ledger's sigma, Binomial(n, q) batches, the ledger's "
             "curve as dp-accounting composes it")
SGD_NOT = ("a bound from the white-box one-run audit on compas (12 parameters: too few canaries; see "
           "'Tightness' for MNIST)")
GEN = ("Gaussian noise on the selected marginals (zCDP) and exponential-mechanism selections, through the "
       "mechanisms")
GEN_SHOWS = ("both laws at their entries' scales; marginals move by at most their L2 sensitivity and selection "
             "scores by at most theirs on the neighbours searched")
GEN_NOT = "that the bounds hold beyond the neighbours searched; the sampling of synthetic rows is post-processing"
ALGO_NOTES = {
    "adfc": ("Gaussian " + FM, FM_SHOWS, FM_NOT),
    "pdfc": ("Laplace " + FM, FM_SHOWS, FM_NOT),
    "pflr": ("Laplace " + FM, FM_SHOWS, FM_NOT),
    "pflr_star": ("Laplace " + FM + " (two releases: mu and the polynomial)", FM_SHOWS, FM_NOT),
    "privlr": ("Laplace " + FM, FM_SHOWS, FM_NOT),
    "relaxed_fm": ("Gaussian " + FM, FM_SHOWS, FM_NOT),
    "cdp_group": (CDP + " (kappa_GS)", CDP_SHOWS, CDP_NOT),
    "cdp_zhu": (CDP + " (kappa_CS)", CDP_SHOWS, CDP_NOT),
    "crfs": ("Step 3's Laplace importances (mechanisms) and the output perturbation of the selected set (as "
             "cdp_zhu)", "the same as cdp_zhu for the release; Step 3's importances move by at most their L1 "
             "sensitivity 2", CDP_NOT + "; Step 5's noisy evaluations, drawn with no ledger (counted), and the "
             "non-private Steps 1, 2 and 4"),
    "dpm": ("Laplace noise on every entry of M = (P + P^2)/2, through the mechanisms",
            "fails: one edge between low-degree vertices moves M by 2 in L1, above the sqrt(2) its Laplace noise "
            "is scaled to (C3 of dpne.md: sqrt(2) is Lemma 1's L2 bound)",
            "the noise law and the ledger pass; the embedding computed from the noisy M is post-processing"),
    "dpne": ("objective perturbation: rows eta_i with norm Gamma(k, 2 Delta / eps), uniform directions, observed at "
             "their function, and the walk matrix M whose change Lemma 1 bounds",
             "one entry for the noise term; eta's norms and directions of the claimed law; M moves by at most "
             "Delta = sqrt(2) in L2 on the edge neighbours searched",
             "that the released minimiser is private: Theorem 7 does not cover noise_term=abs (the default) and "
             "H is learned without privacy; the checks see the noise and the query, not the optimisation"),
    "dpsgd": (SGD, SGD_SHOWS, SGD_NOT),
    "dpsgd_es": (SGD, SGD_SHOWS, SGD_NOT + "; the stop epoch read off private held-out rows (why heuristic)"),
    "dpsgd_f": (SGD + "; noisy group counts from numpy", SGD_SHOWS, SGD_NOT + "; the noisy group counts"),
    "dpsgd_naive": (SGD + "; noisy group counts from numpy", SGD_SHOWS, SGD_NOT + "; the noisy group counts"),
    "ffpdg": ("RON-Gauss's releases after FFPDG's pre-processor, through the mechanisms",
              "fails: the pre-processor reweights and resamples the raw records, so one record moves the "
              "generator's second moments by more than RON-Gauss's sensitivity",
              "the rigorous pipeline (algo.order=fair_last) is not the suite's configuration"),
    "ron_gauss": ("Laplace noise on the projected data's second moments (and class counts), through the mechanisms",
                  "the law and the ledger; the second moments move by at most their sensitivity on the neighbours "
                  "searched (per-row projections keyed by record, so neighbours share them)",
                  "the random projection's own privacy argument; the default configuration's label is heuristic"),
    "lapmech": ("Laplace noise on every cell of the full contingency table, drawn from the generator in chunks; "
                "the table before noise observed at its function",
                "every draw paid for and Laplace at 1 / eps; the table moves by exactly 1 in L1 (its declared "
                "sensitivity) on the neighbours searched",
                "PC on the noisy table is post-processing; the number of records, used by the small-sample rule, "
                "is treated as public"),
    "mst": (GEN, GEN_SHOWS, GEN_NOT),
    "pfdr": (GEN, GEN_SHOWS, GEN_NOT),
    "prefair_greedy": (GEN, GEN_SHOWS, GEN_NOT),
    "prefair_optimal": (GEN, GEN_SHOWS, GEN_NOT),
    "privpc": ("exponential-mechanism selections of the edges to cut, through the mechanisms",
               "fails: the greedy distance scores move by 4 between neighbours against their declared "
               "sensitivity 1 (the score is an upper bound of the exact minimum the proof covers)",
               "the law and the ledger pass"),
    "privpc_star": ("Laplace noise on the covariance's lower triangle, through the mechanisms",
                    "fails: on a D at one corner of the code box with the canary at the opposite corner the "
                    "covariance moves by about 1.7 times its declared sensitivity p(p+1)/(2(n-1)), which leaves out "
                    "the change of the mean; the audited rows alone move it by half the bound (why the search "
                    "without that D passed it)",
                    "the law and the ledger pass"),
}

TIGHT_HEAD = """
## Tightness: how close the bound gets to the claim

The issue's goals: a lower bound of at least 0.8 of the claim on single Laplace and Gaussian releases, at least 0.5
for DP-SGD at eps = 4 in the white-box one-run audit. The rows: the single releases of the control table below at
10,000 trials per neighbour, and DP-SGD's white-box one-run audit (`make audit` runs it; `--only dpsgd_one_run`)
on the MNIST CNN (300 rows, 10 epochs, 431,080 parameters, one Dirac gradient canary each), in full batches and at
the Poisson rate 1/3. The suite's own rows (the table at the top) give their ratio too: near 0 at eps = 1 with few
trials, which says the statistical test sees little there, not that the claims are tight.
"""

TIGHT_TAIL = """
How the one-run bound is read. Each canary adds sign_i C e_(k_i) to the summed gradient of the steps that sample it
(in the run with probability 1/2); its score is the released noisy sums less the clipped sum of the real examples
along its coordinate. The most extreme scores are guessed in and out, how many planned from the claim alone
(`sgd.plan_guesses`). The right guesses are read against the ledger entry's own mechanism family, exactly mu-GDP for
full batches and dp-accounting's PLD of the subsampled Gaussian otherwise, with an f-DP analysis (`bounds.fdp_tail`:
for an f-DP mechanism, c P[C >= c] <= m F((r - c + 1) P[C >= c-1] / m), F = 1 - f, applied from P[C >= 0] = 1). The
bound is the eps at the claim's delta of the least private member of that family the guesses rule out. Were the
training correct, the guesses would rule out its entry's own member with probability at most 1 %; the check fails
only then (tests/test_audit_one_run.py: never above the true mu of a Gaussian over 20 runs, the exact Binomial tail
of randomised response never undercut, half the noise ruled out). The (eps, delta) analysis of Steinke, Nasr and
Jagielski reached 1.53 (0.38) on 7,800 canaries: a Gaussian's eps at delta = 1e-5 lies in tails no count of guesses
reaches, while its trade-off curve is seen in the bulk of the scores. The claim itself is loose: the ledger's RDP
accountant states 4 where the entry's mechanism is exactly (3.25, 1e-5)-DP, so the best a perfect audit could report
is 0.81 of the claim.
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
finding on an algorithm labelled `heuristic`; its mutant is flagged with a change twice as large. DP-SGD's noise
halved is caught twice: on compas by the noise's law (`dpsgd_noise`), on MNIST in full batches also by the
white-box one-run audit, which rules out the ledger entry's own mechanism.
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
input-space canaries (black box) beside its white-box checks. DP-SGD's white-box one-run audit at eps = 4 on MNIST
is in "Tightness" below.
"""

DOC_TAIL = """
Reading the table: `pass` = no evidence against the claim at 99 % confidence and every white-box check passed (or
had nothing to check); `fail` = the claim is refuted by the bound or a white-box check failed. Algorithms whose
guarantee is `heuristic` are audited like the others; their claim is the eps their ledger records. A `fail` there
confirms what the `heuristic` label says: FFPDG's pre-processor reweights and resamples the raw records before
RON-Gauss, so one record moves the generator's second moments by more than RON-Gauss's sensitivity (the white-box
sensitivity check prints the neighbour); PrivPC's greedy selection scores move by more than their declared
sensitivity 1; PrivPC*'s covariance by more than its p(p+1)/(2(n-1)) on a D at a corner of the code box; dpM's walk
matrix by 2 in L1 for one edge against the sqrt(2) its Laplace noise is scaled to. `make audit` exits non-zero only
when an `eps-DP`, `(eps,delta)-DP` or `zCDP` claim is refuted. Neighbouring fits share every random draw but the
canary's: per-row draws (RON-Gauss's white noise, FFPDG's resampling) are keyed by record in an audit, so adding the
canary no longer shifts the projection and the noise of the other rows (which made RON-Gauss's rigorous variant read
eps >= 1.93 against its claim of 1).
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
