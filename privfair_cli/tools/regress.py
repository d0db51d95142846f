"""`privfair reproduce NAME --check` (`make regress`): the exact regression guard of the published-number comparisons.

Two checks per experiment, neither of which writes anything committed:

1. **Re-derivation.** The canonical comparison derived from the committed run record (`reproduce.derive`, what
   `privfair reproduce NAME --no-run` writes) must equal the committed `comparison.csv` byte for byte. No training:
   it catches a comparison edited by hand, a record and a comparison committed out of step, and a change of the
   verdict rules or the experiment's reasons whose comparisons were not re-derived.
2. **Exact re-runs.** Seeded runs are deterministic, so no statistics are needed: a stratified sample of the
   recorded runs (`sample`: every algorithm and dataset of the record, at least one seed each, then one run per
   compared cell not yet touched, cheapest first, within `BUDGET` seconds of recorded run time; a pair whose every
   run takes longer than `LONG` seconds is left out and counted, so CI stays within its time) is run again in a
   fresh folder (`results/reproduce/NAME/subsets/guard/runs/`, emptied first) and every recorded metric must equal
   its record within `RELATIVE` (relative) or `ABSOLUTE`. Wall-clock metrics (`TIMING`) are not compared. Runs
   recorded on a CUDA device are left out of the exact check: GPU kernels (cuDNN convolutions, atomics in reductions)
   do not give the CPU's bits, and the run order of a GPU's float sums differs between cards, so the record's
   `device` column keeps them apart. Runs trained as one seed group (`seeds_batched`) are re-run as that group.

It ends with its coverage: `N of M recorded runs re-run, K of L compared cells touched` (a cell is touched when at
least one run it reads was re-run), and the cells that are `not_run` for want of a run record.
"""

from __future__ import annotations

import math
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from privfair_cli import results
from privfair_cli.tools import records
from privfair_cli.tools import reproduce as rp

RELATIVE, ABSOLUTE = 1e-6, 1e-9  # how close a re-run metric must be to its record
BUDGET = 30.0  # recorded seconds of runs re-run per experiment beyond one run per algorithm and dataset
LONG = 120.0  # recorded seconds above which a run (or its seed group) is too long for the guard: left out, counted
TIMING = re.compile(r"runtime|seconds|(^|_)time($|_)")  # wall-clock metrics: machine-dependent, not compared
COMPARED = ("match", "consistent", "deviates", "substitute")  # verdicts of a cell with a number


@dataclass
class Outcome:
    """What the guard found for one experiment."""

    name: str
    failures: list[str] = field(default_factory=list)
    recorded: int = 0  # runs in the record
    rerun: int = 0  # of them re-run and compared
    cuda: int = 0  # recorded on a CUDA device: out of the exact check
    cells: int = 0  # compared cells of the canonical comparison
    unrecorded: int = 0  # cells with a number no run record gives: not_run (reproduce._row)
    touched: int = 0  # of them read at least one re-run run
    seconds: float = 0.0
    note: str = ""  # why nothing was re-run
    long: int = 0  # (algorithm, dataset) pairs whose every run is longer than LONG: not re-run
    renamed: list[str] = field(default_factory=list)  # re-run runs whose config identity hash changed

    @property
    def ok(self) -> bool:
        return not self.failures


def same(a, b) -> bool:
    """A recorded and a re-run value agree: both missing, or within RELATIVE / ABSOLUTE."""
    a = float("nan") if a is None else float(a)
    b = float("nan") if b is None else float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= max(RELATIVE * max(abs(a), abs(b)), ABSOLUTE)


def reads(record: pd.DataFrame, spec: dict) -> tuple[pd.DataFrame, list[set]]:
    """The comparison of the record and, per row, the record positions of the runs it reads."""
    used: list[set] = []
    runs = records.runs_view(record).reset_index(drop=True)
    comparison = rp.compare(runs, pd.read_csv(rp.published_dir() / spec["published"]), spec, used=used)
    return comparison, used


def _group(record: pd.DataFrame, i: int) -> list[int]:
    """The record positions of the seed group of run `i` (itself where it trained alone)."""
    batched = str(record.at[i, "seeds_batched"] or "")
    if not batched:
        return [i]
    seeds = {int(s) for s in batched.split()}
    rest = [o for o in records.job_of(record.loc[i]) if not o.startswith("seed=")]
    return [j for j in record.index if int(record.at[j, "seed"]) in seeds and
            [o for o in records.job_of(record.loc[j]) if not o.startswith("seed=")] == rest]


def sample(record: pd.DataFrame, used: list[set], budget: float = BUDGET, long: list | None = None) -> list[int]:
    """The record positions to re-run: per algorithm and dataset, the cheapest run of its smallest seed (the
    cheapest run of any seed when that one is longer than LONG; none when every run is, the pair then appended to
    `long`); then, for each compared cell no chosen run touches, its cheapest run, cheapest cells first, while the
    recorded seconds stay within `budget`. Only CPU runs; a seed group's runs come together (and cost together)."""
    cpu = record[record["device"].fillna("") != "cuda"]
    if cpu.empty:
        return []
    cost = cpu["seconds"].fillna(0.0)
    chosen: list[int] = []
    for pair, part in cpu.assign(cost=cost).groupby(["algo", "data"], sort=True):
        ranked = part.assign(first=part["seed"] != part["seed"].min()).sort_values(["first", "cost", "run_id"])
        fits = [j for j in ranked.index if float(cost[_group(record, j)].sum()) <= LONG]
        if not fits:
            if long is not None:
                long.append(pair)
            continue
        chosen += [j for j in _group(record, fits[0]) if j not in chosen]
    spent = 0.0
    options = []
    for rows in used:
        if rows & set(chosen) or not rows & set(cpu.index):
            continue
        j = min(rows & set(cpu.index), key=lambda k: (float(cost[_group(record, k)].sum()), record.at[k, "run_id"]))
        options.append((float(cost[_group(record, j)].sum()), record.at[j, "run_id"], j))
    for c, _, j in sorted(options):
        if j in chosen or spent + c > budget:
            continue
        group = _group(record, j)
        chosen += [k for k in group if k not in chosen]
        spent += c
    return sorted(chosen)


def rederive(name: str, spec: dict, root: Path) -> list[str]:
    """Check 1: the comparison derived from the record equals the committed comparison.csv, byte for byte."""
    committed_csv = root / "comparison.csv"
    record = records.read(root)
    if not committed_csv.is_file():
        return [] if record is None else [f"a run record but no comparison: run `privfair reproduce {name} --no-run`"]
    committed = pd.read_csv(committed_csv)
    derived = rp.table(rp.derive(spec, record, committed), spec).to_csv(index=False, float_format="%.4f")
    if derived != committed_csv.read_text():
        old, new = committed_csv.read_text().splitlines(), derived.splitlines()
        where = next((k for k, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
        return [f"comparison.csv is not what its run record gives (first difference on line {where + 1}): run "
                f"`privfair reproduce {name} --no-run` and commit what it writes"]
    return []


def rerun(name: str, record: pd.DataFrame, chosen: list[int], sweep: Path) -> tuple[list[str], list[str]]:
    """Check 2: run the chosen recorded runs again into `sweep` and compare every recorded metric. Returns the
    failures, and the runs whose config identity hash changed (a note: their metrics are compared all the same; a
    default added at its neutral value changes no number, a real change of the config shows in them)."""
    from privfair_cli.compose import job_config
    from privfair_cli.tools.sweep import run_dir_of, run_task

    failures, renamed = [], []
    metrics = [c for c in records.metric_columns(record) if not TIMING.search(c.removeprefix("metric."))]
    done: set[int] = set()
    for i in chosen:
        if i in done:
            continue
        group = [j for j in _group(record, i) if j in chosen]
        done.update(group)
        jobs = [[f"experiment={name}", *records.job_of(record.loc[j])] for j in group]
        for j, job, (status, line, _, _) in zip(group, jobs, run_task(jobs, sweep), strict=True):
            run_id = record.at[j, "run_id"]
            if status == "failed":
                failures.append(f"{run_id}: the run failed: {line}")
                continue
            run_dir = run_dir_of(sweep, job_config(job), job)
            if run_dir.relative_to(sweep).as_posix() != run_id:
                renamed.append(f"{run_id} -> {run_dir.relative_to(sweep).as_posix()}")
            rec, _ = results.read_record(run_dir)
            fresh = (rec or {}).get("metrics", {})
            for column in metrics:
                key = column.removeprefix("metric.")
                if key not in fresh:
                    if not pd.isna(record.at[j, column]):
                        failures.append(f"{run_id}: {key} is recorded ({record.at[j, column]!r}) but the run no "
                                        f"longer reports it")
                elif not same(record.at[j, column], fresh[key]):
                    failures.append(f"{run_id}: {key} = {fresh[key]!r}, recorded {record.at[j, column]!r}")
    return failures, renamed


def check(name: str, budget: float = BUDGET) -> Outcome:
    """Both checks for experiment `name` (the recorded runs re-run as they ran, one after the other); the
    committed files are only read."""
    spec = rp.experiment_spec(name)
    root = rp.RESULTS_ROOT / "reproduce" / name
    outcome = Outcome(name)
    start = time.perf_counter()
    outcome.failures += rederive(name, spec, root)
    committed_csv = root / "comparison.csv"
    committed = pd.read_csv(committed_csv, dtype=str, keep_default_na=False) if committed_csv.is_file() else None
    if committed is not None:
        outcome.cells = int(committed["verdict"].isin(COMPARED).sum())
        outcome.unrecorded = int((committed.get("recorded", pd.Series(dtype=str)) == "no").sum())
    record = records.read(root)
    if record is None or record.empty:
        outcome.note = "no run record" + (f": {outcome.unrecorded} cells not_run for want of one"
                                           if outcome.unrecorded else ", no compared cell")
        return outcome
    outcome.recorded = len(record)
    outcome.cuda = int((record["device"].fillna("") == "cuda").sum())
    comparison, used = reads(record, spec)
    long: list = []
    chosen = sample(record, used, budget, long)
    outcome.long = len(long)
    sweep = rp.RESULTS_ROOT / "reproduce" / name / "subsets" / "guard" / "runs"
    shutil.rmtree(sweep, ignore_errors=True)  # a fresh run: nothing of an earlier version is reused
    failures, outcome.renamed = rerun(name, record, chosen, sweep)
    outcome.failures += failures
    outcome.rerun = len(chosen)
    touched = [bool(rows & set(chosen)) for rows in used]
    outcome.touched = int(sum(t for t, v in zip(touched, comparison["verdict"], strict=True) if v in COMPARED))
    outcome.seconds = time.perf_counter() - start
    return outcome


def summary(outcomes: list[Outcome]) -> str:
    """One line per experiment, every failure, then the coverage."""
    lines = []
    for o in outcomes:
        state = "ok" if o.ok else "FAIL"
        if o.recorded:
            state += (f": {o.rerun} of {o.recorded} recorded runs re-run"
                      + (f" ({o.cuda} CUDA runs out of the exact check)" if o.cuda else "")
                      + f", {o.touched} of {o.cells} compared cells touched, {o.seconds:.0f} s"
                      + (f"; {o.long} algorithm/dataset pairs left out (every run longer than {LONG:.0f} s)"
                         if o.long else "")
                      + (f"; {len(o.renamed)} re-run runs have another config hash now (identity changed, numbers "
                         f"compared all the same; re-record to update: `privfair reproduce {o.name}`)"
                         if o.renamed else ""))
        else:
            state += f": {o.note}"
        lines.append(f"{o.name}: {state}")
    for o in outcomes:
        lines += [f"FAIL {o.name}: {f}" for f in o.failures]
    runs = sum(o.recorded for o in outcomes)
    bare = [o.name for o in outcomes if not o.recorded]
    lines.append(f"coverage: {sum(o.rerun for o in outcomes)} of {runs} recorded runs re-run, "
                 f"{sum(o.touched for o in outcomes)} of {sum(o.cells for o in outcomes)} compared cells touched; "
                 f"{len(bare)} experiments have no run record; {sum(o.unrecorded for o in outcomes)} cells are "
                 f"not_run for want of one (numbers no record re-derives)")
    return "\n".join(lines)


def coverage(outcomes: list[Outcome]) -> dict[str, int]:
    """The coverage numbers of `summary`."""
    return {"rerun": sum(o.rerun for o in outcomes), "recorded": sum(o.recorded for o in outcomes),
            "touched": sum(o.touched for o in outcomes), "cells": sum(o.cells for o in outcomes)}
