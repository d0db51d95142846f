"""Hydra multirun plumbing in the launching process: the callback that follows a sweep's jobs (SweepWatch,
configs/config.yaml `hydra.callbacks`), the per-job records it reads, and the sweeper patch that skips Hydra's
serial re-composition of every job.

Each job writes `<sweep dir>/.jobs/<job number>.json` when it ends, whichever launcher runs it (the basic launcher
in this process, joblib or submitit in others). SweepWatch prints one line per job under a progress bar and, when
the launching process set `$PRIVFAIR_SWEEP_OUTCOME` (a file it owns), writes the sweep folder there when the
sweep starts and the `sweep.Outcome` when it ends: `privfair run -m` reads its exit status, or after an
interrupt the folder to count complete runs in, from that file.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from privfair_cli import results
from privfair_cli.tools.sweep import Outcome

JOBS_DIR = ".jobs"  # <sweep dir>/.jobs/<job number>.json: one record per finished job, read by the launcher
OUTCOME_ENV = "PRIVFAIR_SWEEP_OUTCOME"


def record_job(sweep_dir: Path, num: int, status: str, run_dir: Path, line: str, messages: list[str]) -> None:
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
    """Hydra callback: in the launching process, follow a multirun's job records as jobs finish, print one line
    per job under a progress bar, sum up at the end, and hand the outcome to `$PRIVFAIR_SWEEP_OUTCOME`."""

    def on_multirun_start(self, config, **kwargs) -> None:
        import shutil
        import threading

        from privfair_cli import progress

        sweep_dir = Path(str(config.hydra.sweep.dir))
        shutil.rmtree(sweep_dir / JOBS_DIR, ignore_errors=True)
        total = int(os.environ.get("PRIVFAIR_SWEEP_TOTAL") or 0) or None
        self.outcome, self.seen = Outcome(total or 0, sweep_dir=sweep_dir), set()
        self._save()
        self.bar = progress.Bar(total, "sweep", unit="runs", interval=30.0).__enter__()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _save(self) -> None:
        if os.environ.get(OUTCOME_ENV):
            self.outcome.save(Path(os.environ[OUTCOME_ENV]))

    def _follow(self) -> None:
        while not self.stop.wait(0.25):
            self._poll()
        self._poll()

    def _poll(self) -> None:
        folder = Path(self.outcome.sweep_dir) / JOBS_DIR
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
        self.stop.set()
        self.thread.join()
        self.bar.__exit__(None, None, None)
        self.outcome.total = max(self.outcome.total, len(self.seen))
        self._save()
        print(self.outcome.summary(), flush=True)

    def __getstate__(self) -> dict:
        return {}  # launchers ship callbacks to the job processes, which need none of the watcher's state

    # the rest of Hydra's callback interface: nothing to do
    def on_run_start(self, config, **kwargs) -> None: ...
    def on_run_end(self, config, **kwargs) -> None: ...
    def on_job_start(self, config, **kwargs) -> None: ...
    def on_job_end(self, config, job_return, **kwargs) -> None: ...
