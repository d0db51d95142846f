"""`make audit` (`python -m privfair_cli.tools.audit --all`): every registered private algorithm audited at eps = 1
on a small dataset of its kind, each row written to `results/audit/<algo>/row.json` so that runs of parts of the
suite combine, and the summary of the rows with the control table (`controls.mechanism_rows`) and the mutant
catalogue's verdicts (`mutant_rows`, `make audit-mutants`)."""

from __future__ import annotations

import json
from pathlib import Path

from privfair_cli.errors import PrivfairError
from privfair_cli.tools.audit.controls import mechanism_rows
from privfair_cli.tools.audit.outputs import STATISTICS
from privfair_cli.tools.audit.report import ROOT, line, write
from privfair_cli.tools.audit.run import audit

# Every private algorithm on a small dataset: data card, extra overrides, audit options (fewer trials where a fit
# costs more). Statistics and canaries are the defaults; eps = 1.
SUITE_DEFAULT = {"classifier": "compas", "generator": "compas", "graph": "adult_pc", "embedding": "cora"}
SUITE_TRIALS = {"classifier": 500, "generator": 100, "graph": 30, "embedding": 40}
SUITE_EXTRA = {"generator": ["algo.mlp_epochs=1"],  # the downstream MLP is not part of the release
               "classifier_rdp": ["algo.reference=false"]}  # DP-SGD's non-private reference model neither
# Algorithms whose kind's default card or extras do not fit them: their own (card, extra overrides).
SUITE_ALGO = {"ffpdg": ("compas_ffpdg", []), "ron_gauss": ("compas_ffpdg", []),
              "dpsgd_es": ("compas", ["algo.batch_size=64"])}  # the audit sample has fewer rows than b = 256
# A CR-FS fit grows a random forest per candidate feature set; the correlated-DP classifiers fit one per trial too.
SUITE_ALGO_TRIALS = {"crfs": 40, "cdp_zhu": 100, "cdp_group": 100}
# traced fits of the white-box checks where a fit costs seconds (crfs: 20, the fewest whose 20 output perturbations
# the goodness-of-fit test reads)
SUITE_WHITEBOX_FITS = {"crfs": 20, "lapmech": 10}
# DP-SGD's white-box one-run audit at eps = 4 (the tightness rows): the MNIST CNN on 300 rows, one Dirac canary per
# parameter, in full batches (exactly mu-GDP) and at the Poisson rate 1/3
ONE_RUN_CONFIGS = [("full batches", ["algo=dpsgd", "data=mnist", "eps=4", "algo.reference=false", "algo.epochs=10",
                                     "algo.batch_size=300"]),
                   ("Poisson rate 1/3", ["algo=dpsgd", "data=mnist", "eps=4", "algo.reference=false",
                                         "algo.epochs=10", "algo.batch_size=100"])]


def suite(names: list[str] | None = None, root: Path = ROOT) -> list[dict]:
    """Audit each private algorithm (or `names`) with the suite's settings; each row is also written to
    `root/<algo>/row.json`, so runs of parts of the suite (`--only`) combine (`collect`)."""
    from privfair_cli import registry

    plugins = registry.load_plugins()
    rows = []
    for name in names or sorted(n for n, c in plugins.items() if c.private):
        row = suite_row(name, plugins[name], root)
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "row.json").write_text(json.dumps(row, indent=2) + "\n")
        rows.append(row)
    return rows


def suite_row(name: str, cls, root: Path) -> dict:
    rdp = cls.kind == "classifier" and cls.accountant == "rdp"
    extra = SUITE_EXTRA.get("classifier_rdp" if rdp else cls.kind, [])
    opts = {"trials": SUITE_ALGO_TRIALS.get(name, SUITE_TRIALS.get(cls.kind, 100))}
    if name in SUITE_WHITEBOX_FITS:
        opts["whitebox_fits"] = SUITE_WHITEBOX_FITS[name]
    data = SUITE_DEFAULT.get(cls.kind)
    data, extra = SUITE_ALGO.get(name, (data, extra))
    if cls.kind == "classifier" and not hasattr(cls, "predict_proba") and not hasattr(cls, "audit_statistic"):
        why = "its release is not a model with predict_proba and it defines no audit_statistic"
        print(f"{name}: not run ({why})", flush=True)
        return {"algo": name, "data": "-", "verdict": "not_run", "reason": why}
    if data is None or (cls.kind not in STATISTICS and not hasattr(cls, "audit_statistic")):
        print(f"{name}: not run (task kind {cls.kind} has no audit statistic yet)", flush=True)
        return {"algo": name, "data": "-", "verdict": "not_run",
                "reason": f"task kind {cls.kind} has no audit statistic yet"}
    try:
        rep = audit([f"algo={name}", f"data={data}", "eps=1"] + extra, opts)
    except PrivfairError as err:
        print(f"{name}: not run ({err})", flush=True)
        return {"algo": name, "data": data, "verdict": "not_run", "reason": str(err)}
    write(rep, root / name / data / "eps=1")
    print(line(rep) + f" [{rep.seconds:.1f} s]", flush=True)
    return {"algo": name, "data": data, "mode": rep.mode, "view": rep.details.get("view", "-"),
            "guarantee": rep.guarantee, "eps_claimed": rep.eps_claimed, "delta_claimed": rep.delta_claimed,
            "eps_lb": rep.eps_lb, "confidence": rep.confidence, "verdict": rep.verdict,
            "seconds": round(rep.seconds, 1), "trials": rep.details.get("trials"),
            "canaries": rep.details.get("canaries"),
            "whitebox": {c["name"]: c["verdict"] for c in rep.details.get("whitebox") or []},
            "whitebox_failures": [f"{c['name']}: {c['detail']}" for c in rep.details.get("whitebox") or []
                                  if c["verdict"] == "fail"]}


def one_run_rows(root: Path = ROOT) -> list[dict]:
    """The white-box one-run audit of DP-SGD at eps = 4 (`ONE_RUN_CONFIGS`): bound, claim, their ratio, canaries;
    written to `root/one_run.json` for docs/audit.md."""
    import time

    from privfair_cli.tools.audit import fitting, options, sgd

    rows = []
    for name, overrides in ONE_RUN_CONFIGS:
        t0 = time.perf_counter()
        try:
            s = fitting.setup(overrides, options.OPTIONS["rows"][0], 0)
            check = sgd.one_run_white_box(s, options.defaults())
        except PrivfairError as err:
            rows.append({"config": " ".join(overrides), "name": name, "verdict": "not_run", "reason": str(err)})
            print(f"one run, {name}: not run ({err})", flush=True)
            continue
        rows.append({"config": " ".join(overrides), "name": name, "verdict": check.verdict, "detail": check.detail,
                     "seconds": round(time.perf_counter() - t0, 1)} | check.figures)
        print(f"one run, {name}: {check.detail}", flush=True)
    root.mkdir(parents=True, exist_ok=True)
    (root / "one_run.json").write_text(json.dumps(rows, indent=2, default=float) + "\n")
    return rows


def collect(root: Path = ROOT) -> dict:
    """The summary: one row per registered private algorithm, from its row.json."""
    from privfair_cli import registry

    rows = []
    for name in sorted(n for n, c in registry.load_plugins().items() if c.private):
        path = root / name / "row.json"
        rows.append(json.loads(path.read_text()) if path.is_file() else
                    {"algo": name, "data": "-", "verdict": "not_run", "reason": "not audited yet (make audit)"})
    mpath, opath = root / "mutants.json", root / "one_run.json"
    one_run = json.loads(opath.read_text()) if opath.is_file() else []
    return {"rows": rows, "seconds": round(sum(r.get("seconds", 0) for r in rows + one_run), 1),
            "mechanisms": mechanism_rows(), "mutants": json.loads(mpath.read_text()) if mpath.is_file() else [],
            "one_run": one_run}


def mutant_rows(root: Path = ROOT, names: list[str] | None = None) -> list[dict]:
    """`make audit-mutants`: every mutant of the catalogue (or `names`) audited, then the same configurations
    without a bug; written to `root/mutants.json` for docs/audit.md."""
    import time

    from privfair_cli.tools.audit import mutants

    rows = []
    for m in mutants.MUTANTS if not names else [m for m in mutants.MUTANTS if m.name in names]:
        t0 = time.perf_counter()
        rep = mutants.audit_mutant(m, m.overrides)
        rows.append({"mutant": m.name, "bug": m.bug, "config": " ".join(m.overrides), "expect": m.expect,
                     "fast": m.fast, "verdict": rep.verdict, "flagged_by": mutants.flagged_by(rep),
                     "seconds": round(time.perf_counter() - t0, 1)})
        print(f"{m.name}: {rep.verdict} (flagged by {', '.join(rows[-1]['flagged_by']) or 'nothing'})", flush=True)
    for overrides in mutants.CORRECT if not names else []:
        t0 = time.perf_counter()
        rep = mutants.audit_mutant(None, overrides)
        rows.append({"mutant": "none (correct)", "bug": "-", "config": " ".join(overrides), "expect": "-",
                     "fast": overrides in {m.overrides for m in mutants.MUTANTS if m.fast}, "verdict": rep.verdict,
                     "flagged_by": mutants.flagged_by(rep),
                     "seconds": round(time.perf_counter() - t0, 1)})
        print(f"correct {' '.join(overrides)}: {rep.verdict}", flush=True)
    root.mkdir(parents=True, exist_ok=True)
    (root / "mutants.json").write_text(json.dumps(rows, indent=2) + "\n")
    return rows
