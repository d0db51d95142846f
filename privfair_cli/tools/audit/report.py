"""An audit's result (`Report`), its one-line verdict, and its run folder: `audit.json` and `histogram.png` of the
two distributions of the statistic, under `results/audit/<algo>/<data>/eps=<eps>` unless `audit.out=` names one."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from privfair_cli.tools.audit.bounds import refutes

ROOT = Path("results/audit")


@dataclass
class Report:
    algo: str
    data: str
    mode: str
    guarantee: str
    eps_claimed: float
    delta_claimed: float
    eps_lb: float
    confidence: float
    verdict: str  # pass | fail
    details: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"


def verdict(eps_lb: float, eps_claimed: float) -> str:
    """`fail` when the lower bound exceeds the claim (beyond rounding), else `pass`."""
    return "fail" if refutes(eps_lb, eps_claimed) else "pass"


def folder(rep: Report, eps_arg: float, opts: dict) -> Path:
    return Path(opts["out"]) if opts["out"] else ROOT / rep.algo / rep.data / f"eps={eps_arg:g}"


def write(rep: Report, out: Path) -> Path:
    from privfair_cli.privacy import to_json
    from privfair_cli.tools import plots

    out.mkdir(parents=True, exist_ok=True)
    d = rep.details
    record = {k: v for k, v in asdict(rep).items() if k != "details"} | {
        "eps_claimed": to_json(rep.eps_claimed), "eps_lb": to_json(rep.eps_lb),
        "details": {k: to_json(v) if isinstance(v, float) else v for k, v in d.items() if k not in ("out_d", "out_d1")}}
    plots.audit_histogram(np.asarray(d["out_d"]), np.asarray(d["out_d1"]), d.get("threshold"),
                          out / "histogram.png", title=line(rep),
                          labels=("canary out", "canary in") if rep.mode == "one_run" else ("D", "D + canary"))
    tmp = out / "audit.json.tmp"
    tmp.write_text(json.dumps(finite(record), indent=2) + "\n")
    tmp.replace(out / "audit.json")
    return out


def line(rep: Report) -> str:
    """The audit's verdict in one line, then one line per failed white-box check."""
    claim = f"eps={rep.eps_claimed:.4g}" + (f", delta={rep.delta_claimed:.3g}" if rep.delta_claimed else "")
    checks = rep.details.get("whitebox") or []
    failed = [c for c in checks if c["verdict"] == "fail"]
    count = {v: sum(c["verdict"] == v for c in checks) for v in ("pass", "fail", "skipped")}
    wb = ("; white-box checks: " + ", ".join(f"{n} {v}" for v, n in count.items() if n) if checks else "")
    return (f"{rep.algo} on {rep.data}: empirical eps >= {rep.eps_lb:.3f} at {rep.confidence:.0%} confidence "
            f"({rep.mode}){wb}; claimed {claim} ({rep.guarantee}): {rep.verdict.upper()}"
            + "".join(f"\n  {c['name']}: FAIL: {c['detail']}" for c in failed))


def finite(value):
    """`value` with every float JSON cannot hold (inf, nan) made a number or None, recursively."""
    from privfair_cli.privacy import to_json

    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if isinstance(value, float | np.floating):
        return None if math.isnan(value) else to_json(float(value))
    if isinstance(value, np.integer):
        return int(value)
    return value
