"""`privfair reproduce NAME --check` (`make regress`): the regression guard of the published-number comparisons.

Re-runs the experiment's fast subset (`reproduce.fast: [overrides]` in `configs/experiment/NAME.yaml`) into a fresh
sweep folder (`results/reproduce/NAME/subsets/<slug>/runs/`, emptied first, so nothing from an earlier run or an
earlier version of the code is reused), writes the subset's comparison beside it as `privfair reproduce NAME
<overrides>` does, and compares each fresh cell with the same cell of the committed `comparison.csv`, which it
never writes. An experiment whose runs are too slow or GPU-only declares `fast: {skip: reason}` and is skipped.

The rule (docs/reproducing.md, "Regression guard"). For a cell with committed deviation `d`, tolerance `tol` and
std of our runs `s`, and a fresh deviation `d'` over `n'` runs of the subset:

    slack = 2 c s / sqrt(n')        (two standard errors of the experiment's statistic over n' runs; 0 where s
                                     is undefined; c = 1 for means, sqrt(pi / 2) for medians, whose `s` is the
                                     robust spread 1.4826 MAD: reproduce.STATISTICS)

- a committed `match` fails when |d'| > tol + slack (it now deviates);
- any compared cell fails when |d' - d| > tol + slack (its deviation moved by more than its tolerance);
- the fresh verdict is the committed one unless |d'| is beyond the band tol ± slack on the other side; a verdict
  that changes (or a `substitute` / `not_run` that changes) fails when the reason the config gives the cell is the
  committed reason (the verdict changed but nobody updated the explanation).

Timing cells (a metric starting with `runtime`) depend on the machine and are not compared. Cells outside the
subset (fresh `not_run` because the subset does not cover them) and cells committed as `not_run`
are listed as not compared; a run of the subset that fails fails the guard.
"""

from __future__ import annotations

import math
import re
import shutil
from dataclasses import dataclass, field

import pandas as pd

from privfair_cli.errors import ConfigError
from privfair_cli.tools import reproduce as rp

IDENTITY = ["table", "dataset", "algorithm", "metric"]
TIMING = re.compile(r"runtime")  # wall-clock metrics (and ratios of them): machine-dependent, not compared


@dataclass
class Outcome:
    """What the guard found for one experiment: `failures` (one line per failing cell), `compared` cells,
    `skipped` (the reason, where the experiment declares no fast subset), `out` (the subset's folder)."""

    name: str
    failures: list[str] = field(default_factory=list)
    compared: int = 0
    not_compared: int = 0
    skipped: str = ""
    out: str = ""
    fresh: pd.DataFrame | None = None  # the subset's comparison frame (with the hidden columns)

    @property
    def ok(self) -> bool:
        return not self.failures


def fast_overrides(spec: dict, name: str) -> list[str] | str:
    """The fast subset's overrides, or the reason (a str) the experiment gives for having none."""
    fast = spec.get("fast")
    if isinstance(fast, dict) and set(fast) == {"skip"}:
        return str(fast["skip"])
    if not isinstance(fast, list) or not all(isinstance(o, str) and "=" in o for o in fast):
        raise ConfigError(f"experiment {name}: reproduce.fast must be a list of overrides (key=value) or "
                          f"{{skip: reason}} (got {fast!r})")
    return list(fast)


def _setting(text: str) -> str:
    """The setting without the `runs=N` note, which a subset changes."""
    return ";".join(p for p in str(text).split(";") if not re.fullmatch(r"runs=\d+", p.strip()))


def _num(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _text(value) -> str:
    return "" if pd.isna(value) else str(value).strip()


def _label(row) -> str:
    return f"{row.table} | {row.dataset} | {row.algorithm} | {_setting(row.setting)} | {row.metric}"


def _fresh_verdict(committed: str, dev: float, tol: float, slack: float) -> str:
    """The committed verdict unless the fresh deviation is decisively on the other side of the tolerance."""
    if committed == "match" and abs(dev) > tol + slack:
        return "deviates"
    if committed == "deviates" and abs(dev) < tol - slack:
        return "match"
    return committed


def compare_cells(fresh: pd.DataFrame, committed: pd.DataFrame, factor: float = 1.0) -> tuple[list[str], int, int]:
    """Failures (one line per failing cell), and the numbers of compared and not compared cells. `fresh` is a
    comparison frame of `reproduce.compare` (with its hidden columns), `committed` the committed comparison.csv;
    `factor` is the statistic's standard-error factor c (reproduce.STATISTICS)."""
    if len(fresh) != len(committed):
        return [f"the committed comparison has {len(committed)} cells, the experiment gives {len(fresh)}: "
                f"re-run `privfair reproduce` and commit its comparison"], 0, 0
    failures, compared, skipped = [], 0, 0
    for new, old in zip(fresh.itertuples(index=False), committed.itertuples(index=False), strict=True):
        if [str(getattr(new, c)) for c in IDENTITY] + [_setting(new.setting)] != \
                [str(getattr(old, c)) for c in IDENTITY] + [_setting(old.setting)]:
            return [f"cell {_label(old)} of the committed comparison is {_label(new)} now: re-run "
                    f"`privfair reproduce` and commit its comparison"], 0, 0
        if new.verdict == "not_run" or old.verdict == "not_run" or TIMING.match(str(old.metric)):
            skipped += 1
            continue
        compared += 1
        failures += [f"{_label(old)}: {text}" for text in _cell_failures(new, old, factor)]
    return failures, compared, skipped


def _cell_failures(new, old, factor: float = 1.0) -> list[str]:
    tol, std = _num(old.tolerance), _num(old.ours_std)
    slack = 2 * factor * (0.0 if math.isnan(std) else std) / math.sqrt(max(int(new.runs), 1))
    d_old, d_new = _num(old.deviation), _num(new.deviation)
    out = []
    numeric = not (math.isnan(d_old) or math.isnan(d_new) or math.isnan(tol))
    if numeric and old.verdict == "match" and abs(d_new) > tol + slack:
        out.append(f"matched (deviation {d_old:+.4f}), now deviates: {d_new:+.4f} over {new.runs} runs, beyond "
                   f"tolerance {tol:.4f} + slack {slack:.4f}")
    if numeric and abs(d_new - d_old) > tol + slack:
        out.append(f"deviation moved from {d_old:+.4f} to {d_new:+.4f} over {new.runs} runs, by more than "
                   f"tolerance {tol:.4f} + slack {slack:.4f}")
    verdict = new.verdict if new.verdict in ("substitute",) or old.verdict == "substitute" or not numeric \
        else _fresh_verdict(old.verdict, d_new, tol, slack)
    if verdict != old.verdict and _text(new.stated_reason) == _text(old.reason):
        out.append(f"verdict {old.verdict} -> {verdict} but the reason is unchanged "
                   f"({_text(old.reason) or 'none recorded'}): update the experiment's reason and re-run reproduce")
    return out


def check(name: str, overrides: list[str] | None = None, jobs: int = 1) -> Outcome:
    """Run the fast subset of `name` (with `overrides` on top; `jobs` runs side by side) in a fresh folder and
    compare with the committed comparison; the committed comparison is only read."""
    spec = rp.experiment_spec(name)
    outcome = Outcome(name)
    fast = fast_overrides(spec, name)
    if isinstance(fast, str):
        outcome.skipped = fast
        return outcome
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides or []}
    subset = [o for o in fast if o.split("=", 1)[0].lstrip("+~") not in given] + list(overrides or [])
    committed_csv = rp.RESULTS_ROOT / "reproduce" / name / "comparison.csv"
    if not committed_csv.is_file():
        outcome.failures.append(f"no committed comparison ({committed_csv}): run `privfair reproduce {name}`")
        return outcome
    committed = pd.read_csv(committed_csv, dtype=str, keep_default_na=False)
    sweep = rp.subset_dir(rp.RESULTS_ROOT / "reproduce" / name, subset) / "runs"
    shutil.rmtree(sweep, ignore_errors=True)  # a fresh run: nothing of an earlier version is reused
    fresh = rp.reproduce(name, subset, sweep_dir=sweep, jobs=jobs)
    if fresh is None:
        outcome.skipped = "needs a CUDA device (without_cuda: skip)"
        return outcome
    outcome.out, outcome.fresh = str(fresh.attrs["out"]), fresh
    outcome.failures += [f"run failed: {d}" for d in fresh.attrs["failed"]]
    failures, outcome.compared, outcome.not_compared = compare_cells(
        fresh, committed, rp.STATISTICS[spec.get("statistic", "mean")])
    outcome.failures += failures
    return outcome


def summary(outcomes: list[Outcome]) -> str:
    """One line per experiment, then every failing cell."""
    lines = []
    for o in outcomes:
        state = f"skipped: {o.skipped}" if o.skipped else (
            f"{'ok' if o.ok else 'FAIL'}: {o.compared} cells compared, {o.not_compared} not compared"
            + (f", {len(o.failures)} failures" if o.failures else ""))
        lines.append(f"{o.name}: {state}")
    for o in outcomes:
        lines += [f"FAIL {o.name}: {f}" for f in o.failures]
    return "\n".join(lines)
