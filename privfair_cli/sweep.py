"""Override handling shared by `run` and `reproduce`: config composition, validation of every swept value
before anything runs, and the in-process sweep `reproduce` uses.

`run_inprocess` executes a sweep without Hydra's launcher: it composes the config once per combination of config
groups (algo, data, ...) and substitutes the swept values, instead of composing every job from scratch. Its run
folders, `.hydra/overrides.yaml` records and resume behaviour are those of `privfair run -m` with the same sweep
directory, so either can continue what the other started.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import os
import sys
from functools import lru_cache
from pathlib import Path

from privfair_cli.config import config_dir, group_options
from privfair_cli.errors import ConfigError

GROUPS = ("data", "algo", "mechanism", "budget", "experiment")
# Keys kept out of the `<other swept keys>` folder level (they have levels of their own); as in config.yaml.
DIRNAME_EXCLUDE = {"algo", "data", "eps", "seed", "device", "overwrite", "experiment"}


def split_overrides(overrides: list[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except Exception as err:  # hydra's parse errors carry a multi-line message
        raise ConfigError(f"cannot parse overrides: {str(err).strip().splitlines()[0]}") from None


def values(override) -> list[str]:
    if override.is_sweep_override():
        return [str(v) for v in override.sweep_string_iterator()]
    return [override.get_value_element_as_str()]


def compose(overrides: list[str], with_hydra: bool = False):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(config_dir()), version_base=None):
            return hydra_compose("config", overrides=overrides, return_hydra_config=with_hydra)
    except Exception as err:
        lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
        raise ConfigError(" ".join(lines[:2]) if lines else type(err).__name__) from None
    finally:
        GlobalHydra.instance().clear()


def with_sweeper_params(overrides: list[str]) -> list:
    """The parsed overrides plus the experiment's `hydra.sweeper.params` (command-line values win)."""
    parsed = split_overrides(overrides)
    firsts = [f"{_prefix(ov)}={values(ov)[0]}" for ov in parsed
              if not ov.get_key_element().startswith("hydra.launcher.")]  # the launcher is chosen later
    params = compose(firsts, with_hydra=True).hydra.sweeper.get("params") or {}
    given = {ov.get_key_element().lstrip("+~") for ov in parsed}
    return parsed + split_overrides([f"{k}={v}" for k, v in params.items() if k not in given])


def _prefix(ov) -> str:
    return ov.input_line.split("=", 1)[0]


def prevalidate(overrides: list[str], multirun: bool = False) -> list[str]:
    """Check group choices and every swept value (from the command line and, in a multirun, from the
    experiment's `hydra.sweeper.params`), composing and validating each variant; no data is read.

    Unknown group options and overrides that do not parse raise. So does a bad value in a single run, or in a
    sweep where no point is valid. In a sweep with some valid points, the bad values are returned instead
    (`key=value: problem`, one per value): their jobs fail and are recorded as failed, the others run."""
    from omegaconf import OmegaConf, open_dict

    from privfair_cli import schema

    parsed = with_sweeper_params(overrides) if multirun else split_overrides(overrides)
    base, swept = [], []  # swept: (index in base, key, [(line, typed value), ...]) for keys with several values
    for ov in parsed:
        key = ov.get_key_element().lstrip("+~")
        vals = values(ov)
        if key in GROUPS:
            options = group_options(key)
            for v in vals:
                if v not in options:
                    raise ConfigError(f"{key}={v!r} is unknown; allowed: {', '.join(options)}")
        if key.startswith("hydra"):
            continue
        prefix = _prefix(ov)
        base.append(f"{prefix}={vals[0]}")
        if len(vals) > 1:
            typed = list(ov.sweep_iterator()) if ov.is_sweep_override() else [ov.value()]
            swept.append((len(base) - 1, key, [(f"{prefix}={v}", t) for v, t in zip(vals, typed, strict=True)]))

    def problem(lines: list[str], key: str | None = None, value=None) -> str | None:
        try:
            if key is None or (key in GROUPS and "." not in key):
                cfg = compose(lines)  # a group choice changes the composition
            else:
                cfg = base_cfg.copy()  # a value: substitute it, no need to compose again
                with open_dict(cfg):
                    OmegaConf.update(cfg, key, value, merge=False)
            schema.validate(cfg)
        except ConfigError as err:
            return str(err)
        return None

    error = problem(base)
    for i, _key, options in (swept if error and multirun else ()):  # look for a valid point to vary around
        for line, _ in options[1:]:
            if problem(base[:i] + [line] + base[i + 1:]) is None:
                base[i], error = line, None
                break
        if error is None:
            break
    if error:
        raise ConfigError(error)
    base_cfg = compose(base)
    bad = []
    for i, key, options in swept:
        for line, value in options:
            if line != base[i] and (why := problem(base[:i] + [line] + base[i + 1:], key, value)):
                bad.append(f"{line}: {why}")
    return bad


def launcher_plan(overrides: list[str], n_jobs: int) -> tuple[list[str], int | None]:
    """The launcher overrides of a multirun and the BLAS / torch threads each job may use.

    Without a `hydra/launcher=` choice, a sweep of more than one job runs on the joblib launcher (local processes;
    `hydra.launcher.n_jobs` defaults to the machine's cores). Jobs running side by side on this machine share its
    cores; a Slurm job uses the CPUs Slurm gave it (None here: decided in the job)."""
    given = any(o.lstrip("+").startswith("hydra/launcher=") for o in overrides)
    if not given and (n_jobs > 1 or any(o.startswith("hydra.launcher.") for o in overrides)):
        overrides = [*overrides, "hydra/launcher=joblib"]
    firsts = [f"{_prefix(ov)}={values(ov)[0]}" for ov in split_overrides(overrides)]
    launcher = compose(firsts, with_hydra=True).hydra.launcher
    cores = os.cpu_count() or 1
    target = str(launcher.get("_target_", ""))
    if target.endswith("BasicLauncher"):
        parallel = 1
    elif target.endswith("JoblibLauncher"):
        k = int(launcher.get("n_jobs") or 1)
        parallel = k if k > 0 else max(1, cores + 1 + k)  # joblib: -1 = every core, -2 = all but one, ...
        if str(launcher.get("batch_size")) == "auto" and not any("hydra.launcher.batch_size=" in o for o in overrides):
            # the launcher ships Hydra's context and the sweep's config with every task; a batch ships them once.
            # A quarter of each worker's share (Table 8.2 on 2 workers: 39 s with joblib's automatic batching,
            # 33 s with 30 a batch) still lets the workers end together
            overrides = [*overrides, f"hydra.launcher.batch_size={max(1, n_jobs // (4 * parallel))}"]
    elif target.endswith("submitit_launcher.LocalLauncher"):
        parallel = int(launcher.get("array_parallelism") or n_jobs)
    else:
        return overrides, None  # a cluster: each job has the CPUs its scheduler gave it
    return overrides, max(1, cores // max(1, min(parallel, n_jobs)))


def thread_cap() -> int:
    """The BLAS / OpenMP / torch threads a job of this process may use: $PRIVFAIR_THREADS (set by the launching
    process for jobs that share a machine), else $SLURM_CPUS_PER_TASK, else every core."""
    return int(os.environ.get("PRIVFAIR_THREADS") or os.environ.get("SLURM_CPUS_PER_TASK") or 0) or \
        (os.cpu_count() or 1)


def limit_threads() -> int:
    """Apply `thread_cap()` to this process's thread pools, once per process (a worker runs many jobs)."""
    threads = thread_cap()
    if _limited.get(os.getpid()) != threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)  # read by torch when it is first imported
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)
        _limited[os.getpid()] = threads
    return threads


_limited: dict[int, int] = {}  # process id -> the thread cap already applied


def thread_env(threads: int | None) -> dict[str, str]:
    """Environment for job processes started after this point (read by BLAS / OpenMP at import)."""
    if not threads:
        return {}
    keys = ("PRIVFAIR_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    return dict.fromkeys(keys, str(threads))


# ------------------------------------------------------------------------------------------ in-process sweep
def expand(overrides: list[str]) -> list[list[str]]:
    """Every job of a sweep (cartesian product of the swept values), as lists of `key=value` lines."""
    parsed = [ov for ov in with_sweeper_params(overrides) if not ov.get_key_element().startswith("hydra")]
    choices = [[f"{_prefix(ov)}={v}" for v in values(ov)] for ov in parsed]
    return [list(job) for job in itertools.product(*choices)]


@lru_cache(maxsize=64)
def _composed(group_lines: tuple[str, ...]):
    return compose(list(group_lines))


def job_config(job: list[str]):
    """The config of one job: composed once per group combination, swept values substituted."""
    from omegaconf import OmegaConf, open_dict

    parsed = split_overrides(job)
    is_group = [ov.get_key_element().lstrip("+~") in GROUPS or ov.input_line.startswith("~") for ov in parsed]
    cfg = copy.deepcopy(_composed(tuple(line for line, g in zip(job, is_group, strict=True) if g)))
    with open_dict(cfg):
        for ov, g in zip(parsed, is_group, strict=True):
            if not g:
                key = ov.get_key_element().lstrip("+")
                if not ov.input_line.startswith("+") and OmegaConf.select(cfg, key, default="__missing__") == \
                        "__missing__":
                    raise ConfigError(f"Could not override '{key}'. To append to your config use +{ov.input_line}")
                OmegaConf.update(cfg, key, ov.value(), merge=False)
    return cfg


def run_dir_of(sweep_dir: Path, cfg, job: list[str]) -> Path:
    """`<sweep dir>/<algo>/<data>/eps=<eps>/<other swept keys>/seed=<seed>`, as `hydra.sweep.subdir` names it."""
    lines = sorted(ov.input_line for ov in split_overrides(job)
                   if ov.get_key_element().lstrip("+~") not in DIRNAME_EXCLUDE)
    return Path(sweep_dir) / str(cfg.algo.name) / str(cfg.data.name) / f"eps={cfg.eps}" / ",".join(lines) / \
        f"seed={cfg.seed}"


def run_inprocess(overrides: list[str], sweep_dir: Path, log=print) -> Outcome:
    """Run every job of a sweep in this process, one after the other; a job that fails is recorded in its folder
    (`failed.json`) and the sweep goes on."""
    from privfair_cli import progress, results, runner

    for point in prevalidate(overrides, multirun=True):
        log(f"warning: {point}; its runs will be recorded as failed")
    jobs = expand(overrides)
    outcome = Outcome(len(jobs))
    show = progress.mode() if log is print else "off"
    with progress.Bar(len(jobs), "sweep", unit="runs", interval=10.0, show=show) as bar:
        say = bar.log if log is print else log
        for i, job in enumerate(jobs, 1):
            cfg = job_config(job)
            run_dir = run_dir_of(sweep_dir, cfg, job)
            messages: list[str] = []
            try:
                record = runner.run(cfg, run_dir, log=messages.append)
            except Exception as err:  # recorded; the other jobs of the sweep still run
                results.write_failure(run_dir, err, job)
                outcome.failed.append(str(run_dir))
                say(f"[{i}/{len(jobs)}] FAILED {' '.join(job)}: {type(err).__name__}: {err}  -> {run_dir}")
                bar.advance(info=f"{len(outcome.failed)} failed")
                continue
            skipped = any(m.startswith("skip") for m in messages)
            outcome.skipped += skipped
            for m in messages:
                if not m.startswith("skip"):
                    say(m)
            if not skipped:
                results.atomic_write(run_dir / ".hydra" / "overrides.yaml", "".join(f"- {line}\n" for line in job))
            say(f"[{i}/{len(jobs)}] {'skip ' if skipped else ''}{summary_line(record)}")
            bar.advance(info=f"{len(outcome.failed)} failed" if outcome.failed else "")
    if outcome.failed:
        log(outcome.summary(sweep_dir))
    return outcome


class Outcome:
    """What a sweep did: jobs, how many were already complete (skipped), and the folders of the failed ones."""

    def __init__(self, total: int, skipped: int = 0, failed: list[str] | None = None):
        self.total, self.skipped, self.failed = total, skipped, list(failed or [])

    def summary(self, sweep_dir) -> str:
        done = self.total - len(self.failed)
        text = f"sweep: {done}/{self.total} runs complete ({self.skipped} already were) in {sweep_dir}"
        if self.failed:
            text += (f"; {len(self.failed)} failed, their errors are in failed.json: "
                     + ", ".join(self.failed[:5]) + (" ..." if len(self.failed) > 5 else "")
                     + ". Run the same command again to retry them")
        return text


# ------------------------------------------------------------------------------------------ Hydra multirun
JOBS_DIR = ".jobs"  # <sweep dir>/.jobs/<job number>.json: one record per finished job, read by the launcher
LAST: Outcome | None = None  # the outcome of the last Hydra multirun in this process (for the exit status)


def record_job(sweep_dir: Path, num: int, status: str, run_dir: Path, line: str, messages: list[str]) -> None:
    import json

    from privfair_cli import results

    results.atomic_write(Path(sweep_dir) / JOBS_DIR / f"{num}.json", json.dumps(
        {"status": status, "run_dir": str(run_dir), "line": line, "messages": messages}))


@contextlib.contextmanager
def prevalidated_sweep():
    """Within this block Hydra's basic sweeper skips its composition of every job in the launching process
    before the launch (`validate_batch_is_legal`, which "repeats work the launcher will do ... to detect
    failures early"): `privfair run` has validated every swept value already, and the launcher composes each
    job where it runs. That serial pass cost about 0.1 s a job and capped a parallel sweep's speed-up."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    original = BasicSweeper.validate_batch_is_legal
    BasicSweeper.validate_batch_is_legal = lambda self, batch: None
    try:
        yield
    finally:
        BasicSweeper.validate_batch_is_legal = original


class SweepWatch:
    """Hydra callback (configs/config.yaml `hydra.callbacks`): in the launching process, follow a multirun's job
    records as jobs finish, whichever launcher runs them, print one line per job under a progress bar, and sum up
    at the end."""

    def on_multirun_start(self, config, **kwargs) -> None:
        import shutil
        import threading

        from privfair_cli import progress

        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        shutil.rmtree(self.sweep_dir / JOBS_DIR, ignore_errors=True)
        total = int(os.environ.get("PRIVFAIR_SWEEP_TOTAL") or 0) or None
        self.outcome, self.seen = Outcome(total or 0), set()
        self.bar = progress.Bar(total, "sweep", unit="runs", interval=30.0).__enter__()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        while not self.stop.wait(0.25):
            self._poll()
        self._poll()

    def _poll(self) -> None:
        import json

        folder = self.sweep_dir / JOBS_DIR
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            if path.name in self.seen:
                continue
            try:
                rec = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue  # not there yet
            self.seen.add(path.name)
            k = f"[{len(self.seen)}/{self.outcome.total or '?'}]"
            for m in rec["messages"]:
                if not m.startswith("skip"):
                    self.bar.log(m)
            if rec["status"] == "failed":
                self.outcome.failed.append(rec["run_dir"])
                self.bar.log(f"{k} FAILED {rec['line']}  -> {rec['run_dir']}")
            else:
                self.outcome.skipped += rec["status"] == "skipped"
                skip = "skip (complete): " if rec["status"] == "skipped" else ""
                self.bar.log(f"{k} {skip}{rec['line']}  -> {rec['run_dir']}")
            failed = len(self.outcome.failed)
            self.bar.update(len(self.seen), info=f"{failed} failed" if failed else "")

    def on_multirun_end(self, config, **kwargs) -> None:
        global LAST
        self.stop.set()
        self.thread.join()
        self.bar.__exit__(None, None, None)
        self.outcome.total = max(self.outcome.total, len(self.seen))
        LAST = self.outcome
        print(self.outcome.summary(self.sweep_dir), flush=True)

    def __getstate__(self) -> dict:
        return {}  # launchers ship callbacks to the job processes, which need none of the watcher's state

    # the rest of Hydra's callback interface: nothing to do
    def on_run_start(self, config, **kwargs) -> None: ...
    def on_run_end(self, config, **kwargs) -> None: ...
    def on_job_start(self, config, **kwargs) -> None: ...
    def on_job_end(self, config, job_return, **kwargs) -> None: ...


def summary_line(record: dict) -> str:
    """One line per run for sweeps: identity and the main metrics of its task kind."""
    m = record["metrics"]
    shown = " ".join(f"{k}={m[k]:.4f}" for k in ("accuracy", "risk_difference", "tvd_2way", "edge_tdr")
                     if m.get(k) is not None)
    return f"{record['algo']} {record['data']} eps={record['eps']:g} seed={record['seed']}: {shown}"
