"""The exact regression guard (`privfair reproduce NAME --check`, privfair_cli.tools.regress): a comparison that is
not what its run record gives fails, a re-run metric that moves by more than 1e-6 relative fails (one constant
changed in a metric is enough), CUDA runs stay out of the exact check, and the coverage is reported."""

import hashlib
import json

import pandas as pd
import pytest

from privfair_cli import metrics
from privfair_cli.config import config_dir
from privfair_cli.tools import records, regress
from privfair_cli.tools import reproduce as rp
from tests.conftest import needs_data


def test_same_is_exact_up_to_the_stated_tolerance():
    assert regress.same(0.8, 0.8) and regress.same(None, float("nan"))
    assert regress.same(0.8, 0.8 * (1 + 5e-7)) and not regress.same(0.8, 0.8 * (1 + 2e-6))
    assert regress.same(0.0, 1e-10) and not regress.same(0.0, 1e-8)
    assert not regress.same(0.5, None) and not regress.same(None, 0.5)
    assert regress.TIMING.search("runtime_seconds") and regress.TIMING.search("fit_time")
    assert not regress.TIMING.search("accuracy") and not regress.TIMING.search("timestep_count")


def record(rows: list[dict]) -> pd.DataFrame:
    base = {"config_hash": "h", "eps": 1.0, "delta": 0.0, "overrides": "[]", "device": "cpu", "machine": "cpu x86_64",
            "threads": 1, "seeds_batched": "", "seconds": 1.0, "commit": "c", "date": "d", "statuses": "",
            "metric.accuracy": 0.8}
    return records.frame([base | r for r in rows])


def test_the_sample_covers_every_algorithm_and_dataset_then_cells_within_the_budget_and_no_cuda_run():
    rec = record([{"run_id": f"{a}/{d}/s{s}", "algo": a, "data": d, "seed": s, "seconds": 10.0 + s}
                  for a in ("lr", "pflr") for d in ("adult", "dutch") for s in (0, 1, 2)]
                 + [{"run_id": "gan/adult/s0", "algo": "gan", "data": "adult", "seed": 0, "device": "cuda"}])
    used = [{i} for i in rec.index]  # one cell per run
    chosen = regress.sample(rec, used, budget=0.0)
    picked = rec.loc[chosen]
    assert sorted(zip(picked.algo, picked.data, strict=True)) == [("lr", "adult"), ("lr", "dutch"),
                                                                  ("pflr", "adult"), ("pflr", "dutch")]
    assert set(picked.seed) == {0} and "gan" not in set(picked.algo)  # the cheapest seed; the CUDA run never
    more = rec.loc[regress.sample(rec, used, budget=25.0)]
    assert len(more) == 6 and set(more.seconds) == {10.0, 11.0}  # the two cheapest untouched cells fit 25 s
    every = regress.sample(rec, used, budget=1e9)
    assert len(every) == 12


def test_a_seed_group_is_re_run_together():
    job = lambda s: json.dumps(["algo=cfgan", "data=adult", f"seed={s}"])  # noqa: E731
    rec = record([{"run_id": f"cfgan/adult/s{s}", "algo": "cfgan", "data": "adult", "seed": s, "overrides": job(s),
                   "seeds_batched": "0 1 2"} for s in (0, 1, 2)])
    assert regress.sample(rec, [{0}, {1}, {2}], budget=0.0) == [0, 1, 2]


def test_a_pair_whose_every_run_is_too_long_is_left_out_and_counted():
    rec = record([{"run_id": f"{a}/adult/s{s}", "algo": a, "data": "adult", "seed": s, "seconds": sec}
                  for a, secs in (("gan", (900.0, 700.0)), ("lr", (200.0, 5.0))) for s, sec in enumerate(secs)])
    long: list = []
    picked = rec.loc[regress.sample(rec, [{i} for i in rec.index], budget=0.0, long=long)]
    assert long == [("gan", "adult")]  # no run of it within LONG
    assert list(picked.run_id) == ["lr/adult/s1"]  # its smallest seed is too long: the cheapest other seed


CHEAP, SUBSET = "ding2020_table1", ["seed=range(1)", "algo=lr", "eps=10"]  # one run: lr's 4 cells (eps = inf)


@needs_data("adult")
def test_the_guard_passes_on_its_record_and_fails_when_a_metric_constant_or_the_comparison_changes(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRIVFAIR_PROGRESS", "off")
    rp.reproduce(CHEAP, SUBSET, update_canonical=True)  # a record of one run, and its comparison
    root = tmp_path / "results" / "reproduce" / CHEAP
    csv, rec = root / "comparison.csv", root / records.FILE
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (csv, rec)}
    outcome = regress.check(CHEAP)
    assert outcome.ok, outcome.failures
    assert (outcome.rerun, outcome.recorded, outcome.touched, outcome.cells) == (1, 1, 4, 4)
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (csv, rec)} == before  # only read
    assert "coverage: 1 of 1 recorded runs re-run, 4 of 4 compared cells touched" in regress.summary([outcome])

    # one constant of the group-rate metric changes by 1e-4: every risk difference moves, and the guard says which
    rate = metrics._rate
    monkeypatch.setattr(metrics, "_rate", lambda num, den: rate(num, den) * (1 + 1e-4))
    failed = regress.check(CHEAP)
    assert not failed.ok and any("risk_difference_abs = " in f and "recorded" in f for f in failed.failures)
    monkeypatch.setattr(metrics, "_rate", rate)

    # a comparison edited by hand is not what its record gives
    text = csv.read_text()
    csv.write_text(text.replace(",match,", ",deviates,", 1))
    (failure,) = regress.check(CHEAP).failures
    assert "comparison.csv is not what its run record gives" in failure
    csv.write_text(text)

    # a run recorded on a CUDA device is out of the exact check
    cuda = records.read(root).assign(device="cuda")
    records.write(cuda, root)
    outcome = regress.check(CHEAP)
    assert outcome.ok and (outcome.rerun, outcome.cuda) == (0, 1)


def test_cells_without_a_run_record_are_not_run_and_counted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "results" / "reproduce" / CHEAP
    root.mkdir(parents=True)
    real = config_dir().parent / "results" / "reproduce" / CHEAP / "comparison.csv"
    committed = pd.read_csv(real)
    committed.to_csv(root / "comparison.csv", index=False, float_format="%.4f")
    records.path_of(root).unlink(missing_ok=True)
    rp.reproduce(CHEAP, [], run=False, update_canonical=True)  # the committed numbers kept, recorded = no
    outcome = regress.check(CHEAP)
    numbered = int(committed["ours_mean"].notna().sum())
    assert outcome.ok and outcome.recorded == 0 and outcome.cells == 0 and outcome.unrecorded == numbered > 0
    assert outcome.note == f"no run record: {numbered} cells not_run for want of one"
    line = regress.summary([outcome]).splitlines()[-1]
    assert f"0 of 0 compared cells touched; 1 experiments have no run record; {numbered} cells are not_run" in line


def test_reproduce_all_ends_with_the_summary_and_wall_times(monkeypatch, capsys):
    from privfair_cli.main import main

    monkeypatch.chdir(config_dir().parent)
    calls = []
    monkeypatch.setattr(rp, "reproduce",  # nothing runs
                        lambda name, overrides, run=True, jobs=1, update_canonical=False: calls.append(jobs))
    assert main(["reproduce", "all"]) == 0
    out = capsys.readouterr().out
    assert "Reproduction summary" in out and "| wall time |" in out and set(calls) == {1}
    assert "| match | consistent | deviates | substitute | not run | not comparable | run record |" in out
    calls.clear()
    assert main(["reproduce", "all", "--jobs", "2"]) == 0 and set(calls) == {2}


def test_no_run_derives_from_the_record_and_check_takes_no_overrides(monkeypatch, capsys):
    """--no-run trains nothing; without overrides it re-derives the canonical comparison from the record (merging
    any runs here); --check is refused with --no-run, --update or overrides."""
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
    assert main(["reproduce", "xu2021_table8_1", "--check", "seed=1"]) != 0
    assert "it takes no overrides" in capsys.readouterr().err


def test_check_flag_runs_the_guard_and_fails_on_a_failure(monkeypatch, capsys):
    from privfair_cli.main import main

    monkeypatch.setattr(regress, "check", lambda name: regress.Outcome(name, failures=["run x: accuracy moved"]))
    assert main(["reproduce", "xu2021_table8_1", "--check"]) == 1
    assert "FAIL xu2021_table8_1: run x: accuracy moved" in capsys.readouterr().out
    monkeypatch.setattr(regress, "check", lambda name: regress.Outcome(name, note="no run record: not covered"))
    assert main(["reproduce", "--check", "all"]) == 0
    assert "coverage: 0 of 0 recorded runs re-run" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["ding2020_table1", "xu2021_table8_1", "pujol2023_table3"])
def test_committed_comparisons_are_what_their_records_give(monkeypatch, name):
    """The CI check in small: the committed comparison equals its re-derivation (record, or committed numbers)."""
    monkeypatch.chdir(config_dir().parent)
    spec = rp.experiment_spec(name)
    assert regress.rederive(name, spec, rp.RESULTS_ROOT / "reproduce" / name) == []
