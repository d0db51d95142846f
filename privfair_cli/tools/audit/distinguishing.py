"""The distinguishing test on a plugin's own fit: `audit.trials` fits on D and on D' (one canary record or edge
apart) with independent seeded noise, each mapped to a scalar (the release view's log-likelihood ratio, `replay`,
or the output view's statistic, `outputs`), then the threshold test of `bounds.distinguish`."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from privfair_cli.errors import ConfigError
from privfair_cli.tools.audit.bounds import distinguish
from privfair_cli.tools.audit.canaries import canary_record, with_edge, with_records
from privfair_cli.tools.audit.fitting import Setup, claim, fast_threadpool, fit
from privfair_cli.tools.audit.outputs import statistic
from privfair_cli.tools.audit.replay import Diverged, Recording, release_statistic
from privfair_cli.tools.audit.report import Report, verdict


def distinguishing(s: Setup, opts: dict, progress) -> Report:
    """The test with the canary `opts["canary"]`, in the view `opts["view"]` (`auto`: the release view unless the
    fit draws noise outside privfair's mechanisms)."""
    canary, keep = canary_record(s.table, opts["canary"])
    if "edge" in canary:
        d0, d1 = with_edge(s.table, canary["edge"], False), with_edge(s.table, canary["edge"], True)
    else:
        d0 = s.table.subset(keep) if len(keep) < len(s.table) else s.table
        d1 = with_records(d0, [canary])
    with fast_threadpool(s.cls):
        view = opts["view"]
        if view in ("auto", "release"):
            try:
                return _trials(s, opts, progress, canary, d0, d1, "release")
            except Diverged as err:
                if view == "release":
                    raise ConfigError(f"audit.view=release: {err}; the algorithm draws noise outside privfair's "
                                      "mechanisms: use audit.view=output") from None
                progress(f"release view not possible ({err}): output view")
        return _trials(s, opts, progress, canary, d0, d1, "output")


def _trials(s: Setup, opts: dict, progress, canary: dict, d0, d1, view: str) -> Report:
    trials, seed = opts["trials"], opts["seed"]
    out = np.empty((2, trials))
    claimed, releases = None, 0
    for t in range(trials):
        for side, data in ((0, d0), (1, d1)):
            key = (seed, 24, side, t)
            if view == "release":
                noise = Recording(key, row_ids=data.meta.get("row_id"))
                plugin, ledger = fit(s, data, key, noise)
                if not noise.log:
                    raise Diverged("the fit made no release through privfair's mechanisms")
                releases = len(noise.log)
                out[side, t] = release_statistic(s, noise, d1 if side == 0 else d0, key, side == 1)
            else:
                plugin, ledger = fit(s, data, key)
                out[side, t] = statistic(plugin, canary, len(d0), np.random.default_rng([seed, 25, side, t]))
            if claimed is None:
                claimed = claim(plugin, ledger)
        if (t + 1) % max(1, trials // 10) == 0:
            progress(f"{t + 1}/{trials} trials")
    guarantee, eps, delta = claimed
    res = distinguish(out[0], out[1], delta, opts["confidence"])
    what = "log-likelihood ratio of the noisy releases" if view == "release" else f"{s.cls.kind} output"
    return Report(s.rc.algo, s.data, "distinguish", guarantee, eps, delta, res.eps_lb, opts["confidence"],
                  verdict(res.eps_lb, eps),
                  details=asdict(res) | {"trials": trials, "canary": opts["canary"], "rows": len(d0), "view": view,
                                         "statistic": what, "releases_per_fit": releases if view == "release"
                                         else None, "out_d": out[0].tolist(), "out_d1": out[1].tolist()})
