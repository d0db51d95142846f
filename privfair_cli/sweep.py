"""The in-process sweep `reproduce` uses, and what a sweep did (`Outcome`), shared with the Hydra callback.

`run_inprocess` executes a sweep without Hydra's launcher, one job after the other, composing the config once
per combination of config groups (`compose.job_config`). Its run folders (`run_dir_of`, the same names as
`hydra.sweep.subdir`), `overrides.yaml` records and resume behaviour are those of `privfair run -m` with the same
sweep directory, so either can continue what the other started.
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


def run_inprocess(overrides: list[str], sweep_dir: Path, log=print) -> Outcome:
    """Run every job of a sweep in this process, one after the other; a job that fails is recorded in its folder
    (`failed.json`) and the sweep goes on."""
    from privfair_cli import progress, runner

    for point in prevalidate(overrides, multirun=True):
        log(f"warning: {point}; its runs will be recorded as failed")
    jobs = expand(overrides)
    outcome = Outcome(len(jobs), sweep_dir=sweep_dir)
    show = progress.mode() if log is print else "off"
    with progress.Bar(len(jobs), "sweep", unit="runs", interval=10.0, show=show) as bar:
        say = bar.log if log is print else log
        for i, job in enumerate(jobs, 1):
            cfg = job_config(job)
            run_dir = run_dir_of(sweep_dir, cfg, job)
            messages: list[str] = []
            try:
                record = runner.run(cfg, run_dir, log=messages.append, overrides=job)
            except Exception as err:  # recorded; the other jobs of the sweep still run
                outcome.failed.append(str(run_dir))
                say(f"[{i}/{len(jobs)}] FAILED {' '.join(job)}: {type(err).__name__}: {err}  -> {run_dir}")
                bar.advance(info=f"{len(outcome.failed)} failed")
                continue
            skipped = any(m.startswith("skip") for m in messages)
            outcome.skipped += skipped
            for m in messages:
                if not m.startswith("skip"):
                    say(m)
            say(f"[{i}/{len(jobs)}] {'skip ' if skipped else ''}{summary_line(record)}")
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
