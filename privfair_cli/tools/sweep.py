"""The in-process sweep `reproduce` uses, and what a sweep did (`Outcome`), shared with the Hydra callback.

`run_inprocess` executes a sweep without Hydra's launcher, one job after the other in this process, or on `workers`
local processes side by side (each with its share of the cores as its BLAS / torch threads, `threads`), composing
the config once per combination of config groups (`compose.job_config`). Its run folders (`run_dir_of`, the same
names as `hydra.sweep.subdir`), `overrides.yaml` records and resume behaviour are those of `privfair run -m` with the
same sweep directory, so either can continue what the other started.
"""

from __future__ import annotations

import json
from pathlib import Path

from privfair_cli import runid
from privfair_cli.compose import expand, job_config, prevalidate, split_overrides

# Keys kept out of the `<other swept keys>` folder level (they have levels of their own); as in config.yaml.
DIRNAME_EXCLUDE = {"algo", "data", "eps", "seed", "device", "overwrite", "experiment"}


def run_dir_of(sweep_dir: Path, cfg, job: list[str]) -> Path:
    """`<sweep dir>/<algo>/<data>/eps=<eps>/<other swept keys>/seed=<seed>-<run id>`, as `hydra.sweep.subdir`
    names it."""
    lines = sorted(ov.input_line for ov in split_overrides(job)
                   if ov.get_key_element().lstrip("+~") not in DIRNAME_EXCLUDE)
    eps = f"eps={runid.number_text(cfg.eps)}"
    return Path(sweep_dir) / str(cfg.algo.name) / str(cfg.data.name) / eps / ",".join(lines) / \
        f"seed={cfg.seed}-{runid.short_id(cfg)}"


def run_job(job: list[str], sweep_dir: Path) -> tuple[str, str, list[str], str]:
    """Run one job of a sweep: (status `done` | `skipped` | `failed`, its summary line or error, the run's messages,
    its folder). A failure is recorded by the runner in the folder (`failed.json`); it is returned, not raised."""
    from privfair_cli import runner
    from privfair_cli.tools import plots

    cfg = job_config(job)
    run_dir = run_dir_of(sweep_dir, cfg, job)
    messages: list[str] = []
    try:
        record = runner.run(cfg, run_dir, log=messages.append, overrides=job, draw=plots.run_figures)
    except Exception as err:  # recorded; the other jobs of the sweep still run
        return "failed", f"{' '.join(job)}: {type(err).__name__}: {err}", messages, str(run_dir)
    skipped = any(m.startswith("skip") for m in messages)
    return "skipped" if skipped else "done", summary_line(record), messages, str(run_dir)


def _worker_task(task: list[list[str]], sweep_dir: Path, cap: int, launcher: int, cwd: str
                 ) -> list[tuple[str, str, list[str], str]]:
    """`run_task` in a worker process: in the launching process's folder `cwd` (a worker outlives one sweep, and the
    folder it started in may be gone), its thread cap applied, its progress bars left to the launching process
    (`launcher`, its pid), and Ctrl-C too (it stops the sweep and its workers)."""
    import os
    import signal

    from privfair_cli import threads

    os.chdir(cwd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["PRIVFAIR_THREADS"], os.environ["PRIVFAIR_SWEEP_PID"] = str(cap), str(launcher)
    threads.limit_threads()
    return list(run_task(task, sweep_dir))


def _seed_of(job: list[str]) -> float:
    """The job's `seed=` value (0 without one), by which a sweep orders its jobs: the runs of one seed share its
    data split, and a plugin may keep what it built from it for the next run (fair_ssl's factorised graph)."""
    for item in job:
        key, _, value = item.partition("=")
        if key.lstrip("+~") == "seed":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 0.0


def _group_key(job: list[str], sweep_dir: Path) -> tuple | None:
    """What the job shares with the other seeds of its seed group (`seedbatch`): its overrides without `seed=`; None
    when it runs alone: its plugin cannot batch seeds, its noise is secure, its data depend on the seed (a generated
    card, a sampled `n`, a split), or it is complete already."""
    from privfair_cli import datasets, registry, results, schema

    try:
        cfg = job_config(job)
        if not registry.get(str(cfg.algo.name)).seed_batching:
            return None
        rc = schema.validate(cfg)
        generated = hasattr(datasets.loader_module(rc.data.raw), "generate")
    except Exception:  # the run itself reports what is wrong
        return None
    if rc.secure or generated or rc.data.n is not None or rc.data.test_size != 0:
        return None
    if not rc.overwrite and results.is_complete(run_dir_of(sweep_dir, cfg, job)):
        return None
    return tuple(sorted(item for item in job if item.partition("=")[0].lstrip("+~") != "seed"))


def tasks_of(jobs: list[list[str]], sweep_dir: Path) -> list[list[list[str]]]:
    """The jobs in running order as tasks, each run by one process: a job alone, or a seed group (the jobs of one
    `_group_key`, at the place of its first job), whose first run trains every seed of the group (`seedbatch`)."""
    tasks: list[list[list[str]]] = []
    groups: dict[tuple, list[list[str]]] = {}
    for job in jobs:
        key = _group_key(job, sweep_dir)
        if key is None:
            tasks.append([job])
        elif key in groups:
            groups[key].append(job)
        else:
            tasks.append(groups.setdefault(key, [job]))
    return tasks


def run_task(task: list[list[str]], sweep_dir: Path):
    """`run_job` for each job of a task, yielding as each ends; a seed group's runs inside `seedbatch.group`."""
    from privfair_cli import seedbatch

    if len(task) == 1:
        yield run_job(task[0], sweep_dir)
        return
    with seedbatch.group([int(_seed_of(job)) for job in task]):
        for job in task:
            yield run_job(job, sweep_dir)


def run_inprocess(overrides: list[str], sweep_dir: Path, log=print, workers: int = 1) -> Outcome:
    """Run every job of a sweep, one after the other in this process (`workers` = 1) or on `workers` local
    processes side by side, each with cores // workers threads; a job that fails is recorded in its folder
    (`failed.json`) and the sweep goes on. A seed group (`tasks_of`) runs in one process."""
    import os

    from privfair_cli import progress

    for point in prevalidate(overrides, multirun=True):
        log(f"warning: {point}; its runs will be recorded as failed")
    jobs = sorted(expand(overrides), key=_seed_of)  # stable: a seed's runs side by side (they share its split)
    tasks = tasks_of(jobs, sweep_dir)
    outcome = Outcome(len(jobs), sweep_dir=sweep_dir)
    workers = max(1, min(int(workers), len(tasks)))
    if workers == 1:
        results = (result for task in tasks for result in run_task(task, sweep_dir))
    else:
        from joblib import Parallel, delayed

        cap = max(1, (os.cpu_count() or 1) // workers)
        done = Parallel(n_jobs=workers, backend="loky", return_as="generator_unordered")(
            delayed(_worker_task)(task, sweep_dir, cap, os.getpid(), os.getcwd()) for task in tasks)
        results = (result for task_results in done for result in task_results)
    show = progress.mode() if log is print else "off"
    with progress.Bar(len(jobs), "sweep", unit="runs", interval=10.0, show=show) as bar:
        say = bar.log if log is print else log
        for i, (status, line, messages, run_dir) in enumerate(results, 1):
            for m in messages:
                if not m.startswith("skip"):
                    say(m)
            if status == "failed":
                outcome.failed.append(run_dir)
                say(f"[{i}/{len(jobs)}] FAILED {line}  -> {run_dir}")
                bar.advance(info=f"{len(outcome.failed)} failed")
                continue
            outcome.skipped += status == "skipped"
            say(f"[{i}/{len(jobs)}] {'skip ' if status == 'skipped' else ''}{line}")
            bar.advance(info=f"{len(outcome.failed)} failed" if outcome.failed else "")
    if outcome.failed:
        log(outcome.summary())
    return outcome


class Outcome:
    """What a sweep did: jobs, how many were already complete (skipped), and the folders of the failed ones."""

    def __init__(self, total: int, skipped: int = 0, failed: list[str] | None = None, sweep_dir=None):
        self.total, self.skipped, self.failed = total, skipped, list(failed or [])
        self.sweep_dir = sweep_dir

    def summary(self) -> str:
        done = self.total - len(self.failed)
        text = f"sweep: {done}/{self.total} runs complete ({self.skipped} already were) in {self.sweep_dir}"
        if self.failed:
            text += (f"; {len(self.failed)} failed, their errors are in failed.json: "
                     + ", ".join(self.failed[:5]) + (" ..." if len(self.failed) > 5 else "")
                     + ". Run the same command again to retry them")
        return text

    def save(self, path: Path) -> None:
        from privfair_cli import results

        results.atomic_write(Path(path), json.dumps(
            {"total": self.total, "skipped": self.skipped, "failed": self.failed, "sweep_dir": str(self.sweep_dir)}))

    @classmethod
    def load(cls, path: Path) -> Outcome:
        rec = json.loads(Path(path).read_text())
        return cls(rec["total"], rec["skipped"], rec["failed"], rec["sweep_dir"])


def summary_line(record: dict) -> str:
    """One line per run for sweeps: identity and the main metrics of its task kind."""
    m = record["metrics"]
    shown = " ".join(f"{k}={m[k]:.4f}" for k in ("accuracy", "risk_difference", "tvd_2way", "edge_tdr")
                     if m.get(k) is not None)
    return f"{record['algo']} {record['data']} eps={record['eps']:g} seed={record['seed']}: {shown}"
