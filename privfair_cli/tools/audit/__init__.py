"""`privfair audit`: an empirical lower bound on an algorithm's privacy loss (issue 24).

A proof can be wrong and an implementation can skip a noise draw while the ledger still reports the budget; both
pass every functional test. The audit measures instead of assuming. Two tests, written once for every plugin:

**Distinguishing test** (Jagielski et al. 2020; Nasr et al. 2021). Add/remove neighbours (the relation every
sensitivity in privfair assumes): D and D' = D plus one canary record. `audit.canary=extreme`: every feature at
its declared upper bound 1 (the corner of [0, 1]^d of largest norm, which moves sums of x and of x x^T and
gradients the most), the rarer label and group, every discrete attribute at its rarest code of the declared
domain; `audit.canary=row`: the record of D farthest from the mean, D' = D and D = D without it. The plugin's
own `fit` runs `audit.trials` times on each, with independent noise (a fresh seeded `NoiseSource` per trial),
and each run is mapped to a scalar. `audit.view=release` (the default where it applies): every noisy release
of the fit goes through `privfair_cli.privacy` and is recorded; the fit is replayed on the neighbouring dataset
with the same noise seed and forced to the same outputs, which gives the values that dataset would have
released, and the statistic is the exact log-likelihood ratio log p_D'(transcript) - log p_D(transcript)
(Laplace, Gaussian densities; exponential-mechanism logits): the most powerful test of the releases the ledger
accounts for. `audit.view=output` (or where a fit draws noise outside the mechanisms): a statistic of the
output by task kind (`STATISTICS`; a plugin may define `audit_statistic(canary)`):

| kind       | statistic of the output                                                                   |
|------------|-------------------------------------------------------------------------------------------|
| classifier | the canary's log-likelihood log p(y_c | x_c) under the released model (minus its loss)    |
| generator  | sum over attributes of the share of synthetic rows carrying the canary's code             |
| graph      | number of edges of the released skeleton                                                   |
| embedding  | inner product of the canary edge's endpoint embeddings (edge-level neighbours)             |

The trials are split in half: the first half picks the threshold t and the orientation (which dataset a value
above t points to) that maximise the bound, the second half measures the false- and true-positive rates of that
single test, so the choice costs no confidence. With one-sided Clopper-Pearson bounds at level alpha/2 each
(alpha = 1 - `audit.confidence`), FPR <= FPR_hi and TPR >= TPR_lo hold together with probability >= 1 - alpha,
and (eps, delta)-DP implies TPR <= e^eps FPR + delta and 1 - FPR <= e^eps (1 - TPR) + delta, hence

    eps_lb = max(0, log((TPR_lo - delta) / FPR_hi), log((1 - FPR_hi - delta) / (1 - TPR_lo)))

is a lower bound on the true eps with confidence 1 - alpha. The audit fails (exit 1) when eps_lb exceeds the eps
the run's ledger claims (at its delta). A bound far below the claim proves nothing: the statistic may be weak.

**One-run test** for DP-SGD-style training (plugins with the `rdp` accountant, `audit.mode=auto`), where
thousands of trainings are too costly: Steinke, Nasr and Jagielski (2023), "Privacy auditing with one (1)
training run", black-box input-space canaries. `audit.canaries` = m canary records (random corners of the
feature box with random labels) are each included with probability 1/2 in one training run on D; each is scored
by its log-likelihood under the trained model; the k = `audit.guess_fraction` * m highest are guessed "in" and
the k lowest "out"; with v correct of r = 2k guesses, eps_lb is the largest eps whose p-value (their Appendix D:
P[Binomial(r, e^eps/(1+e^eps)) >= v] plus their delta term, 2 m delta max_i P[v > Bin >= v - i] / i) is below
alpha. One training run: the bound is weak at small eps (their Figure 1), never a false alarm.

**White-box release checks** (issue 46; `audit.whitebox=on`, the default): privfair knows more than any black
box, since every noisy release goes through its ledger and its noise source. `whitebox` traces
`audit.whitebox_fits` fits (each ledger entry and each draw with its value before noise, scale and output) and
checks that every draw is paid for by an entry (`ledger`), that the ledger's composition is at least an
independent one by dp-accounting's PLD and RDP accountants (`accounting`), that the noise has the scale and law
its entry claims (`calibration`: Kolmogorov-Smirnov on the probability integral transforms, a z-test of the
exponential mechanism's choices, a Gamma-norm vector's norm and direction), and that no release's query moves
between neighbours (corner canaries, removed records, an adversarial D with one label and group, a D at one corner
of the code box with the canary at the other, replace-one pairs where the sensitivity is stated for them; on a
network, edges added and removed) by more than its declared sensitivity (`sensitivity`, the neighbour's fit
replayed with the same noise). Releases whose noise has another law are observed at their functions for the
length of an audit: the correlated plugins' output perturbation, DPNE's objective perturbation and lapmech's
table. `sgd` observes DP-SGD inside its trainer: clipped per-example norms <= C, the noise of each step ~
N(0, sigma^2 C^2), Binomial(n, q) batches under the Poisson accountant, and its white-box one-run audit with one
Dirac gradient canary per parameter, read with an f-DP analysis (`bounds.fdp_tail`) against the ledger entry's
own mechanism family. A failed check fails the audit whatever the bound. `mutants` is the catalogue of
deliberately broken variants every audit must flag (`make audit-mutants`).

Results go to a run folder (`audit.json`, `histogram.png` of the two output distributions), `results/audit/...`
unless `audit.out=` names one. `python -m privfair_cli.tools.audit --all` (`make audit`) audits every registered
private algorithm (plugin.private) on small data and writes `results/audit/summary.json` and `docs/audit.md`.

One module per concern, one per kind of check:

- `options`: the `audit.*` options (`OPTIONS`), parsed and typed;
- `bounds`: the lower bounds (Clopper-Pearson, the distinguishing test's eps, the one-run p-value and its f-DP
  analysis), pure;
- `canaries`: the neighbouring datasets (canary records and edges, appended rows, the audited subgraph);
- `fitting`: the audited configuration (`Setup`, through the run's own compose and schema), the plugin's own
  fit through a fresh ledger, its claim, the thread-pool shortcut of the many fits;
- `outputs`: the output view's statistic by task kind (`STATISTICS`);
- `replay`: the release view: the recording noise source, the replay of the neighbouring fit, the transcript's
  likelihood;
- `distinguishing`, `one_run`: the two checks on a plugin; `run.audit` picks one by `audit.mode`;
- `whitebox`, `sgd`: the white-box release checks, of every release through the ledger and of DP-SGD;
- `mutants`: the mutant catalogue (test-only patches, one bug each) and its audit;
- `controls`: the same test on the mechanisms themselves, correct and broken, and the tightness rows;
- `report`: an audit's result (`Report`) and its run folder; `suite`: `make audit`; `page`: docs/audit.md;
- `cli`: `privfair audit` (`cmd_audit`) and `python -m privfair_cli.tools.audit`.
"""

from privfair_cli.tools.audit.cli import cmd_audit

__all__ = ["cmd_audit"]
