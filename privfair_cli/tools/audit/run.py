"""One audit: a configuration through the check its `audit.mode` names (`auto`: the one-run test for a classifier
under the `rdp` accountant, else the distinguishing test) and, with `audit.whitebox=on` (the default), the white-box
release checks (`whitebox`, `sgd`); a failed white-box check fails the audit whatever the bound. Timed."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict

from privfair_cli.errors import ConfigError
from privfair_cli.tools.audit.distinguishing import distinguishing
from privfair_cli.tools.audit.fitting import setup
from privfair_cli.tools.audit.one_run import one_run
from privfair_cli.tools.audit.options import defaults
from privfair_cli.tools.audit.report import Report
from privfair_cli.tools.audit.whitebox import whitebox

CHECKS = {"distinguish": distinguishing, "one_run": one_run}


def audit(overrides: list[str], opts: dict | None = None, progress: Callable[[str], None] | None = None) -> Report:
    """Audit one configuration (`algo=... data=... eps=...` overrides) with the audit options `opts`."""
    opts = defaults() | (opts or {})
    t0 = time.perf_counter()
    s = setup(overrides, opts["rows"], opts["seed"])
    mode = opts["mode"]
    if mode == "auto":
        mode = "one_run" if s.cls.accountant == "rdp" and s.cls.kind == "classifier" else "distinguish"
    if mode == "one_run" and s.cls.kind != "classifier":
        raise ConfigError(f"audit.mode=one_run scores canaries by a classifier's loss; algo={s.rc.algo} is a "
                          f"{s.cls.kind}: use audit.mode=distinguish")
    progress = progress or (lambda _m: None)
    rep = CHECKS[mode](s, opts, progress)
    if opts["whitebox"] == "on":
        checks = whitebox(s, opts, progress)
        rep.details["whitebox"] = [asdict(c) for c in checks]
        if any(c.failed for c in checks):
            rep.verdict = "fail"
    rep.seconds = time.perf_counter() - t0
    return rep
