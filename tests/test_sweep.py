"""Sweeps at scale: launchers (joblib, submitit local for real; the Slurm preset as far as sbatch), failed jobs
recorded while the sweep goes on, resume, progress output, and the trade-off plot."""

import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from privfair_cli import compose, progress, registry, results
from privfair_cli.errors import PrivfairError
from privfair_cli.main import main
from privfair_cli.threads import launcher_plan
from privfair_cli.tools import sweep
from tests.conftest import needs_data
from tests.test_cli import privfair

GERMAN = ["algo=lr", "data=german", "data.test_size=0.3"]


def completed(root):
    return sorted(results.complete_runs(root))


def seeds(runs) -> list[str]:
    """`seed=<seed>` of each run folder (named `seed=<seed>-<run id>`)."""
    return sorted(r.name.split("-")[0] for r in runs)


def test_launcher_plan_defaults_to_joblib_and_shares_the_cores(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    overrides, threads = launcher_plan(["algo=lr", "seed=0,1,2"], n_jobs=3)
    assert "hydra/launcher=joblib" in overrides and threads == 2  # n_jobs=-1: 8 cores, 3 jobs side by side
    overrides, threads = launcher_plan(["seed=0,1", "hydra.launcher.n_jobs=2"], n_jobs=240)
    assert threads == 4 and overrides[-1] == "hydra.launcher.batch_size=30"  # a quarter of each worker's share
    overrides, _ = launcher_plan(["hydra.launcher.batch_size=7"], n_jobs=240)
    assert [o for o in overrides if "batch_size" in o] == ["hydra.launcher.batch_size=7"]
    overrides, threads = launcher_plan(["algo=lr"], n_jobs=1)
    assert "hydra/launcher=joblib" not in overrides and threads == 8  # one job: the basic launcher, every core
    overrides, threads = launcher_plan(["seed=0,1", "hydra/launcher=basic"], n_jobs=2)
    assert overrides.count("hydra/launcher=basic") == 1 and "hydra/launcher=joblib" not in overrides
    assert threads == 8
    _, threads = launcher_plan(["seed=0,1", "hydra/launcher=slurm"], n_jobs=2)
    assert threads is None  # decided on the node, from SLURM_CPUS_PER_TASK


def test_slurm_preset_builds_an_sbatch_script(tmp_path, monkeypatch):
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf

    cfg = compose.compose(["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.gpus_per_node=1",
                         "hydra.launcher.timeout_min=120", f"hydra.sweep.dir={tmp_path}"], with_hydra=True)
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    assert params.pop("_target_").endswith("SlurmLauncher")
    # as SlurmLauncher.launch hands the preset to submitit, short of calling sbatch (submitit wants srun on PATH)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    executor = submitit.AutoExecutor(cluster="slurm", folder=tmp_path, slurm_max_num_timeout=0)
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()
                                  if k not in ("max_num_timeout", "submitit_folder")})
    script = executor._executor._make_submission_file_text("python -u -m submitit.core._submit", "uid")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=1", "#SBATCH --time=120",
                 "#SBATCH --cpus-per-task=4", "#SBATCH --mem=16GB"):
        assert line in script


# A stand-in for a Slurm cluster on this machine. `sbatch` answers at once, as Slurm does, and a detached "node"
# then runs the array's tasks one after the other (each once submitit has put its pickle in place) with the
# environment Slurm gives a task; `srun` runs its command into the task's log files; `sacct` reports RUNNING or
# COMPLETED.
FAKE_SLURM = {
    "sbatch": r"""
import os, re, shutil, subprocess, sys, time
here, script = os.path.dirname(sys.argv[0]), sys.argv[-1]
text = open(script).read()
opts = dict(re.findall(r"#SBATCH --([\w-]+)=(\S+)", text))
job = "4242"
if "array" in opts:
    lo, hi = opts["array"].split("%")[0].split("-")
    ids = [f"{job}_{a}" for a in range(int(lo), int(hi) + 1)]
else:
    ids = [job]
open(os.path.join(here, "tasks"), "w").write("\n".join(ids))
shutil.copy(script, os.path.join(here, "job.sh"))
folder = text.split("submitit.core._submit ")[-1].split()[0]
if os.fork() == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for jid in ids:
        pickle = os.path.join(folder.replace("%j", jid), f"{jid}_submitted.pkl")
        deadline = time.time() + 120
        while not os.path.exists(pickle) and time.time() < deadline:
            time.sleep(0.05)
        main, _, task = jid.partition("_")
        env = dict(os.environ, SLURM_JOB_ID=jid.replace("_", "0"), SLURM_CPUS_PER_TASK=opts["cpus-per-task"],
                   SLURM_NTASKS="1", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0",
                   SLURM_JOB_NUM_NODES="1", SLURM_JOB_NODELIST="localhost")
        if task:
            env.update(SLURM_ARRAY_JOB_ID=main, SLURM_ARRAY_TASK_ID=task)
        subprocess.run(["bash", os.path.join(here, "job.sh")], env=env)
        with open(os.path.join(here, "done"), "a") as f:
            f.write(jid + "\n")
    os._exit(0)
print("Submitted batch job " + job)
""",
    "srun": r"""
import os, subprocess, sys
args, files = sys.argv[1:], {}
while args[0].startswith("-"):
    flag = args.pop(0)
    if flag in ("--output", "--error"):
        path = args.pop(0).replace("%A", os.environ.get("SLURM_ARRAY_JOB_ID", "")).replace("%t", "0")
        files[flag] = path.replace("%a", os.environ.get("SLURM_ARRAY_TASK_ID", "")).replace(
            "%j", os.environ["SLURM_JOB_ID"])
        os.makedirs(os.path.dirname(files[flag]), exist_ok=True)
with open(files["--output"], "a") as out, open(files["--error"], "a") as err:
    sys.exit(subprocess.run(args, stdout=out, stderr=err).returncode)
""",
    "sacct": r"""
import os, sys
here = os.path.dirname(sys.argv[0])
done = set(open(os.path.join(here, "done")).read().split()) if os.path.exists(os.path.join(here, "done")) else set()
print("JobID|State|NodeList")
for jid in open(os.path.join(here, "tasks")).read().split():
    print(f"{jid}|{'COMPLETED' if jid in done else 'RUNNING'}|localhost")
""",
}


@needs_data("german_credit")
def test_slurm_preset_runs_a_sweep_through_submitit(tmp_path):
    """`hydra/launcher=slurm` end to end: submitit writes the sbatch array script from the preset and submits it,
    the (stand-in) cluster runs each task as Slurm would, and every job caps its threads to --cpus-per-task."""
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, code in FAKE_SLURM.items():
        (bin_dir / name).write_text(f"#!{sys.executable}\n{code}")
        (bin_dir / name).chmod(0o755)
    env = os.environ | {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "privfair_cli", "run", "-m", "hydra/launcher=slurm", *GERMAN,
                           "seed=0,1", "hydra.launcher.partition=test", "hydra.launcher.cpus_per_task=3",
                           "hydra.sweep.dir=sw"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = completed(tmp_path / "sw")
    assert seeds(runs) == ["seed=0", "seed=1"]
    assert [json.loads((r / "metrics.json").read_text())["env"]["threads"] for r in runs] == [3, 3]
    (script,) = (tmp_path / "sw" / ".submitit").rglob("*_submission.sh")
    text = script.read_text()
    assert "#SBATCH --partition=test" in text and "#SBATCH --array=0-1%2" in text
    assert "#SBATCH --cpus-per-task=3" in text and "#SBATCH --time=60" in text
    assert (bin_dir / "done").read_text().split() == ["4242_0", "4242_1"]
    assert "[2/2]" in proc.stdout and "sweep: 2/2 runs complete" in proc.stdout


@needs_data("german_credit")
def test_joblib_sweep_records_the_bad_point_and_keeps_the_others(tmp_path):
    args = ["run", "-m", *GERMAN, "seed=0,1", "eps=1,0", "hydra.launcher.n_jobs=2", "hydra.sweep.dir=sw"]
    proc = privfair(*args, cwd=tmp_path, check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("warning: eps=0: eps=0.0 must be > 0") == 1  # said once, before anything ran
    runs = completed(tmp_path / "sw")
    assert {r.parent.relative_to(tmp_path / "sw").as_posix() for r in runs} == {"lr/german/eps=1.0/data.test_size=0.3"}
    assert seeds(runs) == ["seed=0", "seed=1"]
    fails = results.failures(tmp_path / "sw")
    assert len(fails) == 2 and {f["error"] for f in fails} == {"ConfigError"}
    assert all("eps=0" in f["overrides"] and "must be > 0" in f["message"] for f in fails)
    assert proc.stdout.count("FAILED") == 2 and "[4/4]" in proc.stdout
    assert "sweep: 2/4 runs complete" in proc.stdout and "2 failed" in proc.stdout
    threads = [json.loads((r / "metrics.json").read_text())["env"]["threads"] for r in runs]
    assert threads == [max(1, (os.cpu_count() or 1) // 2)] * 2  # two jobs side by side share the cores


@needs_data("german_credit")
def test_submitit_local_sweep_writes_two_complete_runs(tmp_path):
    proc = privfair("run", "-m", "hydra/launcher=submitit_local", *GERMAN, "seed=0,1", "hydra.sweep.dir=sw",
                    cwd=tmp_path)
    runs = completed(tmp_path / "sw")
    assert seeds(runs) == ["seed=0", "seed=1"]
    for run in runs:
        record = json.loads((run / "metrics.json").read_text())
        assert record["algo"] == "lr" and 0.6 < record["metrics"]["accuracy"] < 0.9
        assert (run / "config.yaml").is_file() and "seed=" in (run / "overrides.yaml").read_text()
    assert any((tmp_path / "sw" / ".submitit").iterdir())  # submitit's own job folders
    assert "[2/2]" in proc.stdout and "sweep: 2/2 runs complete" in proc.stdout


@needs_data("german_credit")
def test_failing_algorithm_is_recorded_and_the_rerun_resumes(tmp_path, monkeypatch, capsys):
    """An exception inside one job of a sweep: recorded, the others complete; the same sweep again skips the
    complete runs and re-runs the failed one and a half-written one."""
    monkeypatch.chdir(tmp_path)
    cls = registry.get("lr")
    fit, calls = cls.fit, []

    def flaky(self, *args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("solver blew up")
        return fit(self, *args)

    args = ["run", "-m", "hydra/launcher=basic", *GERMAN, "seed=0,1,2", "hydra.sweep.dir=sw"]
    with monkeypatch.context() as m:
        m.setattr(cls, "fit", flaky)
        assert main(args) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "RuntimeError: solver blew up" in out and "1 failed" in out
    assert len(completed(tmp_path / "sw")) == 2
    (fail,) = results.failures(tmp_path / "sw")
    assert fail["error"] == "RuntimeError" and "solver blew up" in fail["traceback"]
    folder = tmp_path / "sw" / "lr/german/eps=1.0/data.test_size=0.3"
    (failed,) = folder.glob("seed=1-*")
    assert fail["run_dir"] == str(failed) and "seed=1" in fail["overrides"] and not fail["kept"]
    assert not (failed / "metrics.json").exists()

    (half,) = folder.glob("seed=2-*")
    (half / "metrics.json").unlink()  # cut off before its last write
    (kept,) = folder.glob("seed=0-*/metrics.json")
    stamp = kept.stat().st_mtime_ns
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.count("skip (complete)") == 1 and "sweep: 3/3 runs complete (1 already were)" in out
    assert len(completed(tmp_path / "sw")) == 3 and results.failures(tmp_path / "sw") == []
    assert kept.stat().st_mtime_ns == stamp


@needs_data("german_credit")
def test_inprocess_sweep_goes_on_past_a_failure(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cls = registry.get("lr")
    fit = cls.fit
    monkeypatch.setattr(cls, "fit", lambda self, train, *a: (_ for _ in ()).throw(ValueError("boom"))
                        if self.cfg.l2 == 10 else fit(self, train, *a))
    lines = []
    outcome = sweep.run_inprocess([*GERMAN, "algo.l2=1,10", "seed=0,1"], tmp_path / "sw", log=lines.append)
    assert (outcome.total, len(outcome.failed)) == (4, 2)
    assert all("algo.l2=10" in f for f in outcome.failed)
    assert len(completed(tmp_path / "sw")) == 2
    assert sum("FAILED" in line for line in lines) == 2 and "2 failed" in lines[-1]


@needs_data("german_credit")
def test_inprocess_sweep_on_workers_matches_one_process(tmp_path, monkeypatch):
    """`workers` = 2: the same run folders and metrics as one after the other; a bad point fails in its worker and
    is recorded; a second call resumes (every complete run skipped)."""
    monkeypatch.chdir(tmp_path)
    grid = [*GERMAN, "algo=lr,privlr", "eps=1,-1", "seed=0,1"]
    lines = []
    one = sweep.run_inprocess(grid, tmp_path / "one", log=lines.append)
    two = sweep.run_inprocess(grid, tmp_path / "two", log=lines.append, workers=2)
    assert (two.total, len(two.failed)) == (one.total, len(one.failed)) == (8, 4)
    assert all("eps=-1" in f for f in two.failed)
    assert sorted(Path(f).relative_to(tmp_path / "two") for f in two.failed) == \
        sorted(Path(f).relative_to(tmp_path / "one") for f in one.failed)
    done = completed(tmp_path / "one")
    assert len(done) == 4 and [p.relative_to(tmp_path / "one") for p in done] == \
        [p.relative_to(tmp_path / "two") for p in completed(tmp_path / "two")]
    for path in done:
        twin = tmp_path / "two" / path.relative_to(tmp_path / "one")
        ours, theirs = (json.loads((d / "metrics.json").read_text())["metrics"] for d in (path, twin))
        assert ours.keys() == theirs.keys()
        assert all(ours[k] == pytest.approx(theirs[k], rel=1e-9, abs=1e-12) for k in ours
                   if isinstance(ours[k], float))
    again = sweep.run_inprocess(grid, tmp_path / "two", log=lines.append, workers=2)
    assert again.skipped == 4 and len(again.failed) == 4  # the failed points are tried again


@needs_data("german_credit")
def test_workers_run_in_the_launching_folder_even_after_theirs_is_gone(tmp_path, monkeypatch):
    """Worker processes outlive a sweep: the next sweep, launched from another folder after the first one's was
    removed, still runs (relative paths resolve in the launching process's folder)."""
    import shutil

    grid = [*GERMAN, "seed=0,1"]
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        outcome = sweep.run_inprocess(grid, Path("sw"), log=lambda _: None, workers=2)
        assert outcome.failed == [] and len(completed(tmp_path / name / "sw")) == 2
        monkeypatch.chdir(tmp_path)
        shutil.rmtree(tmp_path / name)


def test_plain_progress_lines_and_worker_silence(monkeypatch, capsys):
    with progress.Bar(10, "dpsgd", unit="steps", interval=0.0, show="plain") as bar:
        for t in range(10):
            bar.advance(info=f"epoch {t // 5 + 1}/2")
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("dpsgd: 1/10 steps (epoch 1/2)") and "left" in lines[0]
    assert lines[-1].startswith("dpsgd: 10/10 steps (epoch 2/2)") and len(lines) == 11
    with progress.Bar(10, "quiet", interval=60.0, show="plain") as bar:
        bar.advance(10)
    assert capsys.readouterr().out == ""  # short work prints nothing
    monkeypatch.setenv("PRIVFAIR_PROGRESS", "rich")
    assert progress.mode() == "rich"
    monkeypatch.setenv("PRIVFAIR_SWEEP_PID", str(os.getpid() + 1))
    assert progress.mode() == "off"  # a sweep's worker: the launching process draws the bar
    monkeypatch.setenv("PRIVFAIR_PROGRESS", "auto")
    monkeypatch.delenv("PRIVFAIR_SWEEP_PID")
    assert progress.mode() == "plain"  # pytest's stdout is not a terminal


def test_rich_progress_bar_renders(capsys):
    with progress.Bar(4, "sweep", unit="runs", show="rich") as bar:
        with progress.Bar(3, "inner", transient=True, show="rich") as inner:
            inner.advance(3)
            assert len(progress._live.tasks) == 2
        assert len(progress._live.tasks) == 1  # the transient inner bar is gone, the sweep's stays
        bar.advance(4)
        assert progress._live.tasks[0].completed == 4
        bar.log("a line above the bar")
    assert progress._live is None
    out = capsys.readouterr().out
    assert "a line above the bar" in out and "4/4" in out and "runs" in out


@needs_data("german_credit")
def test_report_plot_draws_mean_and_band_per_algorithm(tmp_path, monkeypatch):
    from privfair_cli.tools import plots, report

    monkeypatch.chdir(tmp_path)
    sweep.run_inprocess(["algo=lr,privlr", "data=german", "eps=0.1,1,10,100", "seed=0,1"], tmp_path / "sw",
                        log=lambda _: None)
    summary = report.report(tmp_path / "sw", plot="eps")
    assert (tmp_path / "sw" / "tradeoff_eps.png").stat().st_size > 10_000
    fig = plots.tradeoff(summary, "eps", ["accuracy", "risk_difference"], tmp_path / "again.png")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_ylabel() == "accuracy"
    lines = {line.get_label(): line for line in ax.get_lines()}
    privlr = summary[summary.algo == "privlr"].sort_values("eps")
    assert list(lines["privlr"].get_xdata()) == list(privlr["eps"])
    assert list(lines["privlr"].get_ydata()) == pytest.approx(list(privlr["accuracy_mean"]))
    assert len(ax.collections) == 1  # the ± std band of the private line
    baseline = lines["lr (non-private)"]  # non-private: a dashed level across the panel at its mean over eps
    assert baseline.get_linestyle() == "--"
    assert baseline.get_ydata()[0] == pytest.approx(summary[summary.algo == "lr"]["accuracy_mean"].mean())
    with pytest.raises(PrivfairError, match="not a numeric swept key"):
        plots.tradeoff(summary, "algo", ["accuracy"], tmp_path / "x.png")
    monkeypatch.setattr(plots, "MAX_LINES", 1)  # more lines than fit a panel: one column per family
    fig = plots.tradeoff(summary, "eps", ["accuracy"], tmp_path / "families.png", families=report.families(["privlr"]))
    assert [ax.get_title() for ax in fig.axes] == ["german: functional"]  # lr (non-private) is drawn in every column
    assert {line.get_label() for line in fig.axes[0].get_lines()} >= {"privlr", "lr (non-private)"}
    written = pd.read_csv(tmp_path / "sw" / "summary.csv")
    assert list(written["runs"]) == [2] * 8 and len(written) == 8  # 2 algorithms x 4 budgets, 2 seeds each
    assert list(written["accuracy_mean"]) == pytest.approx(list(summary["accuracy_mean"]))



def sweep_processes(pid: int) -> list[int]:
    """Processes started for the sweep of launching process `pid` (they inherit $PRIVFAIR_SWEEP_PID)."""
    marker = f"PRIVFAIR_SWEEP_PID={pid}\0".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


@needs_data("german_credit")
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT to the process group"])
def test_signal_stops_the_workers_and_keeps_complete_runs(tmp_path, how):
    """SIGTERM (a scheduler, `kill`) or SIGINT to the whole process group (Ctrl-C) during a joblib sweep: the
    workers stop with it, every complete run stays complete, one line says how to resume, and resuming works."""
    import signal
    import sys
    import time

    args = ["run", "-m", "algo=lr", "data=german", "data.n=200", "seed=range(20)", "hydra.launcher.n_jobs=2",
            "hydra.sweep.dir=sw"]
    # SIGINT at its default, as in a terminal: a shell that starts a job in the background without job control
    # (e.g. `(make test &)`) has the job ignore SIGINT, which the sweep would inherit
    proc = subprocess.Popen([sys.executable, "-m", "privfair_cli", *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=os.environ | {"PRIVFAIR_PROGRESS": "off"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 240
    while len(completed(tmp_path / "sw")) < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    if how == "SIGTERM":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    name = how.split()[0]
    assert proc.returncode == 128 + getattr(signal, name)
    time.sleep(1)
    assert sweep_processes(proc.pid) == []  # no worker left running (or writing results) after the parent
    assert "Traceback" not in err and err.strip().count("\n") == 0, err
    done = completed(tmp_path / "sw")
    assert err.startswith(f"privfair: interrupted by {name}: ") and "run the same command again to resume" in err
    assert "runs complete in sw are kept" in err and 2 <= len(done) < 20
    for run in (tmp_path / "sw").rglob("seed=*"):
        assert results.is_complete(run) or not (run / "metrics.csv").exists()  # nothing half-written looks done
    time.sleep(2)
    assert completed(tmp_path / "sw") == done
    if how == "SIGTERM":
        again = privfair(*args, cwd=tmp_path)
        assert f"sweep: 20/20 runs complete ({len(done)} already were)" in again.stdout
