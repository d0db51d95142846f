"""`privfair audit algo=A data=D eps=E [audit.key=value ...]` (`cmd_audit`) and `python -m privfair_cli.tools.audit`
(`main`: `--all` runs the suite, `--only` a part of it, `--mutants` the mutant catalogue; then the summary and
docs/audit.md are rewritten)."""

from __future__ import annotations

import argparse
import json
import sys

from privfair_cli.tools.audit.options import options
from privfair_cli.tools.audit.page import DOC, render_doc
from privfair_cli.tools.audit.report import ROOT, folder, line, write
from privfair_cli.tools.audit.run import audit
from privfair_cli.tools.audit.suite import collect, mutant_rows, one_run_rows, suite


def cmd_audit(args) -> int:
    """`privfair audit algo=A data=D eps=E [audit.key=value ...]`: exit 0 pass, 1 lower bound above the claim."""
    opts, overrides = options(args.overrides)
    rep = audit(overrides, opts, progress=lambda m: print(f"  {m}", file=sys.stderr))
    eps_arg = rep.eps_claimed
    out = write(rep, folder(rep, eps_arg, opts))
    print(line(rep))
    print(f"results: {out}")
    return 1 if rep.failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m privfair_cli.tools.audit", description="audit every private algorithm")
    p.add_argument("--all", action="store_true", help="audit every registered private algorithm, write the summary")
    p.add_argument("--only", help="comma-separated algorithms (with --all: only these; the others' rows are kept; "
                   "dpsgd_one_run: DP-SGD's white-box one-run tightness rows)")
    p.add_argument("--doc", action="store_true", help="regenerate results/audit/summary.json and docs/audit.md "
                   "from the rows already written")
    p.add_argument("--mutants", action="store_true", help="audit the mutant catalogue and the same configurations "
                   "without a bug (make audit-mutants); exit 1 unless every mutant fails and every correct one passes")
    a = p.parse_args(argv)
    summary_path = ROOT / "summary.json"
    bad_mutants = []
    if a.mutants:
        rows = mutant_rows(names=a.only.split(",") if a.only and not a.all else None)
        # PrivPC's correct run fails its sensitivity check: a true finding on an algorithm labelled heuristic
        bad_mutants = [r for r in rows if (r["verdict"] == "pass") != (r["mutant"] == "none (correct)")
                       and not (r["mutant"] == "none (correct)" and "algo=privpc " in r["config"] + " ")]
        for r in bad_mutants:
            print(f"not as expected: {r['mutant']} on {r['config']}: {r['verdict']}")
    if a.all:
        only = a.only.split(",") if a.only else None
        names = [n for n in only or [] if n != "dpsgd_one_run"]
        if not only or names:
            rows = suite(names or None)
            print(f"{len(rows)} algorithms in {sum(r.get('seconds', 0) for r in rows):.0f} s")
        if not only or "dpsgd_one_run" in only:
            one_run_rows()
    summary = collect()
    summary_path.parent.mkdir(parents=True, exist_ok=True)
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    DOC.write_text(render_doc(summary))
    print(f"wrote {summary_path} and {DOC}")
    failed = [r["algo"] for r in summary["rows"]
              if r["verdict"] == "fail" and r.get("guarantee") not in ("heuristic", "none")]
    return 1 if failed or bad_mutants else 0
