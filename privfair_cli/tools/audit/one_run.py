"""The one-run test for DP-SGD-style training (Steinke, Nasr and Jagielski 2023, black-box input-space canaries):
each of `audit.canaries` canaries is included with probability 1/2 in one training run on D; each is scored by
its log-likelihood under the trained model against a reference run without canaries; the highest and lowest
`audit.guess_fraction` are guessed in and out, and the count of correct guesses gives `bounds.one_run_eps`."""

from __future__ import annotations

import numpy as np

from privfair_cli.tools.audit.bounds import one_run_eps
from privfair_cli.tools.audit.canaries import one_run_canaries, with_records
from privfair_cli.tools.audit.fitting import Setup, claim, fit
from privfair_cli.tools.audit.outputs import log_likelihoods
from privfair_cli.tools.audit.report import Report, verdict


def one_run(s: Setup, opts: dict, progress) -> Report:
    rng = np.random.default_rng([opts["seed"], 26])
    m, table = opts["canaries"], s.table
    recs, X, y = one_run_canaries(table, m, rng)
    included = rng.random(m) < 0.5
    data = with_records(table, [r for r, inc in zip(recs, included, strict=True) if inc])
    progress(f"one training run on {len(table)} rows + {int(included.sum())} of {m} canaries")
    plugin, ledger = fit(s, data, (opts["seed"], 27))
    guarantee, eps, delta = claim(plugin, ledger)
    progress("reference training run without canaries")
    reference, _ = fit(s, table, (opts["seed"], 28))
    score = log_likelihoods(plugin, X, y) - log_likelihoods(reference, X, y)
    k = max(1, int(opts["guess_fraction"] * m))
    order = np.argsort(score, kind="stable")
    guess_in, guess_out = order[-k:], order[:k]
    v = int(included[guess_in].sum() + (~included[guess_out]).sum())
    r = 2 * k
    eps_lb = one_run_eps(m, r, v, delta, opts["confidence"])
    return Report(s.rc.algo, s.data, "one_run", guarantee, eps, delta, eps_lb, opts["confidence"],
                  verdict(eps_lb, eps),
                  details={"canaries": m, "included": int(included.sum()), "guesses": r, "correct": v,
                           "rows": len(table), "out_d": score[~included].tolist(), "out_d1": score[included].tolist(),
                           "threshold": None})
