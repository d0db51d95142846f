"""Results folder: atomic writes, attempts swapped in only when complete, disk faults, completeness for resume,
the report's handling of unusable records, aggregation; registry and RNG streams."""

import errno
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privfair_cli import registry, results, runner
from privfair_cli.compose import compose
from privfair_cli.errors import ConfigError, DataError, ResultsError
from privfair_cli.main import main
from privfair_cli.tools import report
from tests.conftest import needs_data


def record(seed, acc):
    return {"algo": "lr", "data": "toy", "eps": 1.0, "delta": 0.0, "seed": seed,
            "metrics": {"accuracy": acc, "risk_difference": float("nan")},
            "privacy": {"eps_spent": 0.0, "delta_spent": 0.0, "ledger": []}, "guarantee": "none", "warnings": [],
            "timings": {"total": 0.1},
            "env": {"device": "cpu"}}


def test_write_run_and_collect(tmp_path):
    for seed, acc in enumerate([0.8, 0.9]):
        results.write_run(tmp_path / f"seed={seed}", "algo: lr\n", record(seed, acc))
    rec = json.loads((tmp_path / "seed=0" / "metrics.json").read_text())
    assert rec["metrics"]["risk_difference"] is None  # NaN is written as null, valid JSON
    df = results.collect(tmp_path)
    assert len(df) == 2
    summary = results.summarise(df, ["accuracy"])
    assert summary.loc[0, "runs"] == 2
    assert summary.loc[0, "accuracy_mean"] == pytest.approx(0.85)
    assert summary.loc[0, "accuracy_std"] == pytest.approx(np.std([0.8, 0.9], ddof=1))


def test_interrupted_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(results.os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        results.atomic_write(target, '{"half": ')
    assert not target.exists()
    assert not results.is_complete(tmp_path)


def test_incomplete_metrics_is_not_complete(tmp_path):
    (tmp_path / "metrics.json").write_text('{"algo": "lr", "metr')
    assert not results.is_complete(tmp_path)
    (tmp_path / "metrics.json").write_text(json.dumps({"algo": "lr"}))
    assert not results.is_complete(tmp_path)


def test_summarise_groups_by_swept_keys():
    df = pd.DataFrame({"algo": ["a"] * 4, "data": ["d"] * 4, "eps": [1.0] * 4, "delta": [0.0] * 4,
                       "seed": [0, 1, 0, 1], "eps_f_ratio": ["0.1", "0.1", "0.5", "0.5"],
                       "accuracy": [0.1, 0.3, 0.5, 0.7], "run_dir": list("wxyz")})
    s = results.summarise(df, ["accuracy"])
    assert list(s["accuracy_mean"]) == pytest.approx([0.2, 0.6])


def test_registry_unknown_and_duplicate():
    with pytest.raises(ConfigError, match="allowed"):
        registry.get("no_such_algorithm")
    lr = registry.get("lr")

    class Clash(registry.Plugin):
        name = "lr"
        kind = "classifier"

    with pytest.raises(ValueError, match="twice"):
        registry.register(Clash)
    assert registry.get("lr") is lr


def test_streams_are_independent_and_reproducible():
    first = {name: g.random(3).tolist() for name, g in runner.streams(0).items()}
    assert first == {name: g.random(3).tolist() for name, g in runner.streams(0).items()}  # reproducible
    assert sorted(first) == ["data", "eval", "noise", "split"]
    assert len({tuple(v) for v in first.values()}) == 4  # no two streams start alike (same seed, same object)
    other = {name: g.random(3).tolist() for name, g in runner.streams(1).items()}
    assert all(other[name] != first[name] for name in first)  # each stream follows the seed


def test_complete_records_may_carry_more_keys(tmp_path):
    results.write_run(tmp_path, "algo: lr\n", record(0, 0.8) | {"guarantee": "none", "warnings": []})
    assert results.is_complete(tmp_path)


def test_report_names_each_unusable_record_and_shows_the_guarantee(tmp_path, capsys):
    for seed, (acc, guarantee) in enumerate([(0.8, "eps-DP"), (0.9, "eps-DP"), (0.7, "none")]):
        results.write_run(tmp_path / f"ok{seed}", "algo: lr\n", record(seed, acc) | {"guarantee": guarantee})
    text = json.dumps(record(5, 0.5))
    bad = {"truncated": text[:60], "empty": "", "list": "[1, 2]",
           "accuracy": text.replace('"accuracy": 0.5', '"accuracy": "high"'),
           "seed": text.replace('"seed": 5', '"seed": "five"'),
           "privacy": text.replace('"privacy": {', '"privacy": 3, "x": {'),
           "missing": json.dumps({k: v for k, v in record(5, 0.5).items() if k != "env"})}
    for name, content in bad.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.json").write_text(content)
    summary = report.report(tmp_path)
    out = capsys.readouterr().out
    why = {"truncated": "metrics.json is truncated or not JSON", "empty": "metrics.json is empty",
           "list": "metrics.json holds a list, not an object", "accuracy": "metrics.accuracy is 'high', not a number",
           "seed": "seed is 'five', not an integer", "privacy": "privacy is 3, not an object",
           "missing": "metrics.json lacks env"}
    for name, reason in why.items():
        assert f"skipped {tmp_path / name}: {reason}" in out
    assert list(summary["guarantee"]) == ["eps-DP", "none"] and list(summary["runs"]) == [2, 1]
    assert "guarantee" in (tmp_path / "summary.md").read_text()


def test_report_on_a_folder_it_cannot_write_says_so(tmp_path, capsys):
    results.write_run(tmp_path / "run", "algo: lr\n", record(0, 0.8))
    (tmp_path / "summary.csv").mkdir()  # the summary cannot be put in place (as on a read-only folder)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"privfair: error: cannot write {tmp_path / 'summary.csv'}:") and "\n" not in err


def fail_when_writing(name: str, monkeypatch):
    """Every fsync of a file whose name contains `name` fails as on a full disk."""
    real = os.fsync

    def fsync(fd):
        if name in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_full_disk_during_a_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    fail_when_writing("metrics.json", monkeypatch)
    with pytest.raises(ResultsError, match="No space left on device"):
        results.atomic_write(tmp_path / "metrics.json", "{}")
    assert list(tmp_path.iterdir()) == []


def german(*overrides):
    return compose(["algo=lr", "data=german", "data.n=200", *overrides])


def folder_state(run_dir):
    return {p.relative_to(run_dir).as_posix(): p.read_bytes() for p in run_dir.rglob("*")
            if p.is_file() and ".hydra" not in p.parts and p.name not in ("failed.json", "privfair.log")}


@needs_data("german_credit")
def test_full_disk_keeps_the_earlier_result_and_writes_nothing_half(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with monkeypatch.context() as m:
        fail_when_writing("metrics.json", m)
        assert main(["run", "algo=lr", "data=german", "data.n=200", "hydra.run.dir=new"]) == 2
        assert "No space left on device" in capsys.readouterr().err
    assert folder_state(tmp_path / "new") == {}  # no metrics.csv without metrics.json, no temporary file
    assert json.loads((tmp_path / "new" / "failed.json").read_text())["error"] == "ResultsError"

    assert main(["run", "algo=lr", "data=german", "data.n=200", "hydra.run.dir=old"]) == 0
    before = folder_state(tmp_path / "old")
    with monkeypatch.context() as m:
        fail_when_writing("metrics.csv", m)
        assert main(["run", "algo=lr", "data=german", "data.n=200", "overwrite=true", "hydra.run.dir=old"]) == 2
    assert folder_state(tmp_path / "old") == before


@needs_data("german_credit")
def test_failed_rerun_leaves_the_complete_result_and_a_good_one_swaps_in(tmp_path, monkeypatch):
    out = tmp_path / "run"
    runner.run(german(), out, log=lambda _: None)
    before = folder_state(out)
    cls = registry.get("lr")

    def boom(self, *args):
        raise RuntimeError("solver blew up")

    with monkeypatch.context() as m:
        m.setattr(cls, "fit", boom)
        with pytest.raises(RuntimeError):
            runner.run(german("overwrite=true"), out)  # an exception inside fit
    with pytest.raises(ConfigError):
        runner.run(german("overwrite=true", "eps=-1"), out)  # a bad value found at run time
    with monkeypatch.context() as m:
        m.setenv("PRIVFAIR_DATA_DIR", str(tmp_path / "no_data"))
        with pytest.raises(DataError):
            runner.run(german("overwrite=true"), out)  # the data gone
    assert folder_state(out) == before
    (failure,) = results.failures(tmp_path)
    assert failure["kept"] and failure["error"] == "DataError"

    monkeypatch.setattr(cls, "artifacts", lambda self, folder: (Path(folder) / "weights.txt").write_text("w"))
    runner.run(german("overwrite=true"), out, log=lambda _: None)
    assert (out / "artifacts" / "weights.txt").read_text() == "w"
    assert results.failures(tmp_path) == [] and results.is_complete(out)
    assert not list(out.glob(".attempt-*"))
    monkeypatch.setattr(cls, "artifacts", lambda self, folder: None)
    runner.run(german("overwrite=true"), out, log=lambda _: None)
    assert not (out / "artifacts" / "weights.txt").exists()  # the earlier attempt's artifacts went with its result


@needs_data("german_credit")
def test_read_only_run_folder_fails_in_one_line_and_keeps_the_result(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    base = ["run", "algo=lr", "data=german", "data.n=200", "hydra.run.dir=out"]
    assert main(base) == 0
    before = folder_state(tmp_path / "out")
    mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):  # as root, chmod would not stop the write
        if self.name.startswith(".attempt-"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    capsys.readouterr()
    assert main([*base, "overwrite=true"]) == 2
    assert capsys.readouterr().err == f"privfair: error: cannot write {tmp_path / 'out'}: Permission denied\n"
    assert folder_state(tmp_path / "out") == before
