"""The regression guard (`privfair reproduce NAME --check`, privfair_cli.tools.regress): doctored comparisons fail, the
real one passes, and the committed comparison is never written."""

import hashlib
import math

import pandas as pd
import pytest

from privfair_cli import compose
from privfair_cli.config import config_dir
from privfair_cli.errors import ConfigError
from privfair_cli.tools import regress
from privfair_cli.tools import reproduce as rp
from tests.conftest import needs_data

COLS = rp.COLUMNS


def frame(rows: list[dict]) -> pd.DataFrame:
    """A comparison frame: defaults for every column, `rows` override them."""
    base = {"table": "T", "dataset": "Adult", "algorithm": "lr", "setting": "eps=1;runs=10", "metric": "accuracy",
            "published_mean": 0.80, "published_std": 0.01, "ours_mean": 0.80, "ours_std": 0.01, "deviation": 0.0,
            "tolerance": 0.02, "verdict": "match", "reason": "", rp.KEY: "accuracy", rp.RUNS: 3, rp.STATED: ""}
    return pd.DataFrame([base | r for r in rows])


def committed(df: pd.DataFrame) -> pd.DataFrame:
    """As the guard reads a committed comparison.csv: the written columns, as text."""
    return df[COLS].astype(str).replace("nan", "")


def test_identical_cells_pass():
    fresh = frame([{}, {"algorithm": "privlr", "deviation": 0.1, "verdict": "deviates", "reason": "known",
                        rp.STATED: "known"}])
    failures, compared, skipped = regress.compare_cells(fresh, committed(fresh))
    assert failures == [] and compared == 2 and skipped == 0


def test_a_matched_cell_that_now_deviates_fails():
    old = frame([{}, {"algorithm": "privlr"}])
    new = frame([{}, {"algorithm": "privlr", "deviation": 0.05, "ours_mean": 0.85}])  # tol 0.02 + slack 0.0115
    failures, _, _ = regress.compare_cells(new, committed(old))
    assert len(failures) == 3 and all(f.startswith("T | Adult | privlr | eps=1 | accuracy: ") for f in failures)
    assert "now deviates" in failures[0] and "moved" in failures[1] and "reason is unchanged" in failures[2]


def test_the_subset_slack_widens_the_tolerance():
    """2 s / sqrt(n'): a deviation of 0.025 is beyond tol 0.02 but within 0.02 + 2 * 0.01 / sqrt(3)."""
    old = frame([{}])
    assert regress.compare_cells(frame([{"deviation": 0.025}]), committed(old))[0] == []
    assert regress.compare_cells(frame([{"deviation": 0.025, rp.RUNS: 100}]), committed(old))[0] != []
    assert 0.02 + 2 * 0.01 / math.sqrt(3) > 0.025 > 0.02 + 2 * 0.01 / math.sqrt(100)


def test_a_deviation_that_moves_by_more_than_its_tolerance_fails():
    old = frame([{"deviation": 0.10, "verdict": "deviates", "reason": "r", rp.STATED: "r"}])
    new = frame([{"deviation": 0.16, "verdict": "deviates", "reason": "r", rp.STATED: "r"}])
    (failure,), _, _ = regress.compare_cells(new, committed(old))
    assert "moved from +0.1000 to +0.1600" in failure


def test_a_verdict_change_without_a_reason_change_fails_and_with_one_passes():
    old = frame([{"deviation": 0.10, "verdict": "deviates", "reason": "r", rp.STATED: "r"}])
    now_matches = {"deviation": 0.0, "tolerance": 0.2}  # within the old tolerance + slack: no move failure
    stale = frame([now_matches | {rp.STATED: "r"}])
    (failure,), _, _ = regress.compare_cells(stale, committed(old.assign(tolerance=0.2)))
    assert "verdict deviates -> match but the reason is unchanged (r)" in failure
    updated = frame([now_matches | {rp.STATED: ""}])  # the config's reason was removed with the fix
    assert regress.compare_cells(updated, committed(old.assign(tolerance=0.2)))[0] == []


def test_cells_outside_the_subset_are_not_compared_and_a_changed_table_fails():
    old = frame([{}, {"algorithm": "privlr"}])
    new = frame([{}, {"algorithm": "privlr", "verdict": "not_run", "ours_mean": math.nan, "deviation": math.nan}])
    assert regress.compare_cells(new, committed(old)) == ([], 1, 1)
    (failure,), _, _ = regress.compare_cells(new.iloc[:1], committed(old))
    assert "has 2 cells, the experiment gives 1" in failure
    (failure,), _, _ = regress.compare_cells(frame([{}, {"algorithm": "other"}]), committed(old))
    assert "is T | Adult | other" in failure


def test_fast_overrides():
    assert regress.fast_overrides({"fast": ["seed=range(2)"]}, "x") == ["seed=range(2)"]
    assert regress.fast_overrides({"fast": {"skip": "too slow"}}, "x") == "too slow"
    for bad in (None, "seed=1", ["seed"], {"skip": "a", "other": 1}):
        with pytest.raises(ConfigError, match="reproduce.fast must be"):
            regress.fast_overrides({"fast": bad}, "x")


def test_every_experiment_declares_a_fast_subset_and_every_not_run_cell_a_reason():
    root = config_dir().parent
    for path in sorted((root / "configs" / "experiment").glob("*.yaml")):
        fast = regress.fast_overrides(rp.experiment_spec(path.stem), path.stem)  # raises without a valid `fast`
        if isinstance(fast, list):  # the subset's first job composes (no data is read)
            assert compose.job_config(compose.expand([f"experiment={path.stem}", *fast])[0]), path.stem
        csv = root / "results" / "reproduce" / path.stem / "comparison.csv"
        if csv.is_file():
            cells = pd.read_csv(csv, dtype=str, keep_default_na=False)
            missing = cells[(cells["verdict"] != "match") & (cells["reason"].str.strip() == "")]
            assert missing[missing["verdict"] == "not_run"].empty, f"{path.stem}: a not_run cell without a reason"


CHEAP, SUBSET = "ding2020_table1", ["seed=range(1)", "algo=lr", "eps=10"]  # one run: 4 cells (lr's eps = inf)


@needs_data("adult")
def test_the_guard_passes_on_the_real_comparison_fails_on_a_doctored_one_and_never_writes_it(monkeypatch):
    root = config_dir().parent
    monkeypatch.chdir(root)  # RESULTS_ROOT is relative: the real committed comparison
    csv = root / "results" / "reproduce" / CHEAP / "comparison.csv"
    before = hashlib.sha256(csv.read_bytes()).hexdigest()
    outcome = regress.check(CHEAP, SUBSET)
    assert hashlib.sha256(csv.read_bytes()).hexdigest() == before
    assert outcome.ok, outcome.failures
    assert outcome.compared == 4 and "subsets" in outcome.out
    real = pd.read_csv(csv, dtype=str, keep_default_na=False)
    cell = outcome.fresh.index[outcome.fresh["verdict"] == "match"][0]
    assert real.at[cell, "verdict"] == "match"
    where = f"{real.at[cell, 'table']} | {real.at[cell, 'dataset']} | {real.at[cell, 'algorithm']}"
    moved = real.copy()
    moved.at[cell, "deviation"] = f"{float(real.at[cell, 'deviation']) + 1:.4f}"  # committed value out of tolerance
    failures, _, _ = regress.compare_cells(outcome.fresh, moved)
    assert failures and all(f.startswith(where) for f in failures)
    # committed as deviating with the reason the config gives the cell, and a tolerance the fresh cell is well inside
    flipped, d_new = real.copy(), float(outcome.fresh.at[cell, "deviation"])
    flipped.loc[cell, ["verdict", "deviation", "tolerance", "reason"]] = [
        "deviates", f"{d_new:.4f}", f"{abs(d_new) + 1:.4f}", outcome.fresh.at[cell, rp.STATED]]
    (failure,) = regress.compare_cells(outcome.fresh, flipped)[0]
    assert failure.startswith(where) and "verdict deviates -> match but the reason is unchanged" in failure


def test_reproduce_all_ends_with_the_summary_and_wall_times(monkeypatch, capsys):
    from privfair_cli.main import main

    monkeypatch.chdir(config_dir().parent)
    calls = []
    monkeypatch.setattr(rp, "reproduce",  # nothing runs
                        lambda name, overrides, run=True, jobs=1, update_canonical=False: calls.append(jobs))
    assert main(["reproduce", "all"]) == 0
    out = capsys.readouterr().out
    assert "Reproduction summary" in out and "| wall time |" in out and set(calls) == {1}
    calls.clear()
    assert main(["reproduce", "all", "--jobs", "2"]) == 0 and set(calls) == {2}
    out = capsys.readouterr().out
    assert "| [`xu2021_table8_1`](docs/reproduction.md#xu2021_table8_1) | Table 8.1 | 11 |" in out


def test_no_run_compares_the_runs_here_and_merges_into_the_committed_comparison(monkeypatch, capsys):
    """--no-run trains nothing; without overrides it merges as --update does (the runs here measure part of a
    long table, so a plain rewrite would turn the other cells into not_run); it is refused with --check."""
    from privfair_cli.main import main

    calls = []
    monkeypatch.setattr(rp, "reproduce", lambda name, overrides, run=True, jobs=1, update_canonical=False:
                        calls.append((overrides, run, update_canonical)))
    assert main(["reproduce", "xu2021_table8_1", "--no-run"]) == 0
    assert main(["reproduce", "xu2021_table8_1", "algo=lr", "--no-run"]) == 0
    assert main(["reproduce", "xu2021_table8_1", "--no-run", "algo=lr", "--update"]) == 0
    assert main(["reproduce", "xu2021_table8_1"]) == 0
    assert calls == [([], False, True), (["algo=lr"], False, False), (["algo=lr"], False, True), ([], True, False)]
    assert main(["reproduce", "xu2021_table8_1", "--check", "--no-run"]) != 0
    assert "use --check or --no-run, not both" in capsys.readouterr().err


def test_check_flag_runs_the_guard_and_fails_on_a_failure(monkeypatch, capsys):
    from privfair_cli.main import main

    monkeypatch.setattr(regress, "check",
                        lambda name, overrides, jobs=1: regress.Outcome(name, failures=["T | x: moved"]))
    assert main(["reproduce", "xu2021_table8_1", "--check"]) == 1
    assert "FAIL xu2021_table8_1: T | x: moved" in capsys.readouterr().out
    monkeypatch.setattr(regress, "check", lambda name, overrides, jobs=1: regress.Outcome(name, skipped="too slow"))
    assert main(["reproduce", "--check", "all"]) == 0
