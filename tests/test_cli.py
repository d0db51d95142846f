"""End to end through the console entry point: run, multirun + resume, report, reproduce, bad input."""

import json
import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from privfair_cli.errors import ConfigError
from privfair_cli.main import main
from privfair_cli.results import METRICS_KEYS
from tests.conftest import needs_data


def privfair(*args, cwd, check=True):
    proc = subprocess.run([sys.executable, "-m", "privfair_cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"privfair {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


@needs_data("adult")
def test_run_writes_complete_results(tmp_path):
    privfair("run", "algo=lr", "data=adult", "seed=1", "hydra.run.dir=out", cwd=tmp_path)
    record = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert tuple(record) == METRICS_KEYS
    assert record["algo"] == "lr" and record["data"] == "adult" and record["seed"] == 1
    for key in ("accuracy", "risk_difference", "dtpr", "dfpr"):
        assert isinstance(record["metrics"][key], float)
    assert 0.8 < record["metrics"]["accuracy"] < 0.9
    assert record["privacy"]["eps_spent"] == 0 and record["privacy"]["ledger"] == []
    assert set(record["timings"]) >= {"load", "fit", "evaluate", "total"}
    assert record["env"]["device"] == "cpu"
    row = pd.read_csv(tmp_path / "out" / "metrics.csv")
    assert row.loc[0, "accuracy"] == pytest.approx(record["metrics"]["accuracy"])
    assert "name: lr" in (tmp_path / "out" / "config.yaml").read_text()


@needs_data("adult")
def test_multirun_resume_and_report(tmp_path):
    args = ["run", "-m", "algo=lr", "data=adult", "seed=0,1", "hydra.sweep.dir=sweep"]
    privfair(*args, cwd=tmp_path)
    runs = sorted((tmp_path / "sweep").rglob("metrics.json"))
    assert len(runs) == 2
    stamp = [r.stat().st_mtime_ns for r in runs]
    again = privfair(*args, cwd=tmp_path)
    assert again.stdout.count("skip (complete)") == 2
    assert [r.stat().st_mtime_ns for r in runs] == stamp
    rep = privfair("report", "sweep", cwd=tmp_path)
    summary = pd.read_csv(tmp_path / "sweep" / "summary.csv")
    assert len(summary) == 1 and summary.loc[0, "runs"] == 2
    accs = [json.loads(r.read_text())["metrics"]["accuracy"] for r in runs]
    assert summary.loc[0, "accuracy_mean"] == pytest.approx(sum(accs) / 2)
    assert "accuracy" in (tmp_path / "sweep" / "summary.md").read_text()
    assert re.search(r"\blr\b", rep.stdout)  # the algorithm's row (not "privlr")


@needs_data("adult")
def test_reproduce_subset(tmp_path):
    privfair("reproduce", "xu2021_table8_1", "seed=range(2)", "data=adult", cwd=tmp_path)
    root = tmp_path / "results" / "reproduce" / "xu2021_table8_1"
    assert not (root / "comparison.csv").exists()  # a subset never replaces the experiment's comparison
    (subset,) = root.glob("subsets/*/comparison.csv")
    comp = pd.read_csv(subset)
    assert list(comp.columns)[:12] == ["table", "dataset", "algorithm", "setting", "metric", "published_mean",
                                       "published_std", "ours_mean", "ours_std", "deviation", "tolerance", "verdict"]
    adult = comp[(comp.dataset == "Adult") & (comp.algorithm == "lr")]
    assert set(adult.verdict) <= {"match", "consistent", "deviates"}
    acc = adult[adult.metric == "accuracy"].iloc[0]
    assert abs(acc.ours_mean - acc.published_mean) < 0.03  # plain LR on Adult is close to the published 0.838


def test_prevalidate_returns_the_bad_points_of_a_sweep():
    from privfair_cli import compose

    # the first value is bad: validation varies around a valid point instead
    bad = compose.prevalidate(["algo=lr", "eps=0,1,-2", "seed=0,1", "delta=0,1"], multirun=True)
    assert [b.split(":")[0] for b in bad] == ["eps=0", "eps=-2", "delta=1"]
    assert "must be > 0" in bad[0] and "must be in [0, 1)" in bad[2]
    with pytest.raises(ConfigError, match="must be > 0"):
        compose.prevalidate(["algo=lr", "eps=0"])  # a single run has no other point to run


def test_debug_shows_traceback(tmp_path):
    proc = privfair("--debug", "run", "algo=lr", "eps=0", cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_list_is_one_line_per_algorithm_and_dataset_within_120_columns(tmp_path):
    out = privfair("list", cwd=tmp_path).stdout
    assert max(map(len, out.splitlines())) <= 120
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("  ")}
    assert re.match(r"  pflr +classifier +eps-DP +functional +PFLR", lines["pflr"])
    assert re.match(r"  dpsgd +classifier +\(eps,delta\)-DP +dpsgd +CUDA", lines["dpsgd"])
    assert "privpc_star_thesis" in lines  # every algo= config the errors list, variants of a plugin too
    assert re.match(r"  mnist +\d algorithms; recipes: xu2021_unbalanced", lines["mnist"])
    assert "xu2021_table8_1" in out


def test_list_detail_shows_registry_and_compatibility(tmp_path):
    out = privfair("list", "--detail", cwd=tmp_path).stdout
    assert re.search(r"^│ lr +│ classifier +│ binary_label, +│", out, re.M), out  # the row of lr, not privlr
    assert re.search(r"^│ pc +│ graph +│ discrete or +│", out, re.M)
    mnist = re.search(r"^│ mnist +│ features, label, numeric +│(.*?)^│ \S", out, re.M | re.S)  # its wrapped row
    runs = set(re.findall(r"[a-z_]+", "".join(ln.rsplit("│", 2)[-2] for ln in mnist.group(0).splitlines()[:-1])))
    assert runs - {"describe"} == {"dpsgd", "dpsgd_f", "dpsgd_naive", "sgd"}
    assert re.search(r"^│ kdd +│", out, re.M) and "xu2021_table8_1" in out
    assert re.search(r"^│ dpsgd_es +│ heuristic +│ always heuristic", out, re.M)  # the guarantees table
    assert re.search(r"^│ pflr +│ eps-DP +│ - +│", out, re.M) and not re.search(r"^│ lr +│ none", out, re.M)


@needs_data("german_credit")
def test_a_complete_sweep_is_skipped_without_launching_hydra(tmp_path, monkeypatch, capsys):
    import hydra

    monkeypatch.chdir(tmp_path)
    command = ["run", "-m", "algo=lr", "data=german", "seed=0,1", "hydra.sweep.dir=sw"]
    assert main(command) == 0
    capsys.readouterr()

    def launched(*args, **kwargs):
        raise AssertionError("Hydra was launched for a complete sweep")

    monkeypatch.setattr(hydra, "main", launched)
    assert main(command) == 0
    out = capsys.readouterr().out
    assert out.count("skip (complete): lr german eps=1 seed=") == 2 and "sweep: 2/2 runs complete (2 already" in out
    with pytest.raises(AssertionError, match="launched"):  # one run missing: the sweep runs as before
        main(["run", "-m", "algo=lr", "data=german", "seed=0,1,2", "hydra.sweep.dir=sw"])


@needs_data("german_credit")
def test_inprocess_sweep_matches_hydra_multirun(tmp_path, monkeypatch):
    from privfair_cli.tools import sweep

    overrides = ["algo=lr", "data=german", "seed=0,1", "data.test_size=0.3"]
    privfair("run", "-m", *overrides, "hydra.sweep.dir=hydra", cwd=tmp_path)
    monkeypatch.chdir(tmp_path)
    lines = []
    outcome = sweep.run_inprocess(overrides, tmp_path / "hydra", log=lines.append)
    assert (outcome.total, outcome.skipped, outcome.failed) == (2, 2, [])
    assert all("skip" in line for line in lines)  # same run folders: resumes what Hydra wrote
    sweep.run_inprocess(overrides, tmp_path / "fast", log=lines.append)
    for path in (tmp_path / "hydra").rglob("metrics.json"):
        twin = tmp_path / "fast" / path.relative_to(tmp_path / "hydra")
        assert json.loads(twin.read_text())["metrics"] == json.loads(path.read_text())["metrics"]
        assert (twin.parent / "overrides.yaml").read_text() == (path.parent / "overrides.yaml").read_text()
    assert len(list((tmp_path / "fast").rglob("metrics.json"))) == 2


@needs_data("german_credit")
def test_run_folders_are_unique_per_config(tmp_path, monkeypatch, capsys):
    from omegaconf import OmegaConf

    from privfair_cli import results, runid

    monkeypatch.chdir(tmp_path)
    base = ["run", "algo=lr", "data=german", "data.n=200"]
    for extra in ([], ["algo.l2=10"], ["data.n=300"]):
        assert main([*base, *extra]) == 0
    assert main([*base, "device=cpu", "eps=1"]) == 0  # not part of the identity (eps by value): the same run
    assert "skip (complete)" in capsys.readouterr().out
    runs = results.complete_runs(tmp_path / "results" / "runs")
    assert len(runs) == 3 and {r.parent for r in runs} == {tmp_path / "results/runs/lr/german/eps=1.0"}
    for run in runs:
        assert run.name == f"seed=0-{runid.short_id(OmegaConf.load(run / 'config.yaml'))}"


@needs_data("german_credit")
def test_a_run_never_replaces_another_configs_result(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    base = ["run", "algo=lr", "data=german", "data.n=200", "hydra.run.dir=out"]
    assert main(base) == 0
    stored = (tmp_path / "out" / "metrics.json").read_bytes()
    capsys.readouterr()
    for extra in (["algo.l2=10"], ["algo.l2=10", "overwrite=true"]):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"privfair: error: {tmp_path / 'out'} holds a complete result of another config "
                       "(algo.l2: 1e-06 -> 10.0); a run never replaces it: choose another folder "
                       "(hydra.run.dir / hydra.sweep.dir) or remove it")
        assert (tmp_path / "out" / "metrics.json").read_bytes() == stored
        assert not (tmp_path / "out" / "failed.json").exists()


@needs_data("german_credit")
def test_installed_package_runs_without_the_checkout(tmp_path):
    """`pip install .` (a cluster node, say) carries the configs and published tables inside the package."""
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(tmp_path / "site"), str(repo)], check=True, capture_output=True, timeout=300)
    probe = ("from privfair_cli import config; from privfair_cli.tools import reproduce; print(config.config_dir()); "
             "print(reproduce.published_dir());"
             "from privfair_cli.main import main; raise SystemExit(main(['run', 'algo=lr', 'data=german', "
             "'hydra.run.dir=out']))")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=os.environ | {"PYTHONPATH": str(tmp_path / "site")})
    assert proc.returncode == 0, proc.stderr
    configs, published = proc.stdout.splitlines()[:2]
    assert configs == str(tmp_path / "site" / "privfair_cli" / "configs")
    assert (Path(published) / "pflr.csv").is_file() and (Path(configs) / "hydra" / "launcher" / "slurm.yaml").is_file()
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["algo"] == "lr"


def test_older_experiment_names_are_aliases(capsys):
    """Experiments are `<first author><year>_<table>`; the paper-named prefixes they had still resolve."""
    from privfair_cli.config import canonical_overrides, experiment_name, group_options

    names = set(group_options("experiment"))
    assert experiment_name("prefair2023_table3") == "pujol2023_table3" in names
    assert experiment_name("ffpdg2023_table5") == "xu2023_table5" in names
    assert experiment_name("xu2021_table8_2") == "xu2021_table8_2"
    assert canonical_overrides(["-m", "+experiment=ffpdg2023_table1", "eps=1"]) == \
        ["-m", "+experiment=xu2023_table1", "eps=1"]
    assert all(n.split("_")[0].rstrip("0123456789") in {"xu", "zhang", "ding", "pujol"} for n in names)
    assert main(["reproduce", "prefair2023_table3", "--no-run"]) == 0
    assert "pujol2023_table3" in capsys.readouterr().out
