"""Run folders (DESIGN, results folder): atomic writes, attempts swapped in only when complete, completeness for
resumable sweeps, failure records, aggregation.

A run folder holds `config.yaml`, `overrides.yaml` (the job's overrides, read by `report` for the swept keys),
`metrics.csv`, `artifacts/` (where the plugin wrote any) and `metrics.json`, which marks the result complete.
A run writes all of them into `.attempt-<host>-<pid>/` inside the folder (`Attempt`) and swaps them in only when
all are written: the old `metrics.json` goes first (the folder never looks complete with mixed files), then
artifacts, config and csv, then the new `metrics.json`. An attempt that raises (a bad value, missing data, an
exception in fit, a full disk) is removed and leaves the previous result as it was; the failure is recorded in
`failed.json` beside it. Every write goes to a temporary file renamed into place; a write that fails removes
its temporary file and raises ResultsError (one line), as does a folder that cannot be created.

Deviation from DESIGN: `overrides.yaml` is part of the result (Hydra's `.hydra/` records the latest attempt,
which may have been refused).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import shutil
import socket
import tempfile
from pathlib import Path

from privfair_cli.errors import ResultsError

# metrics.json keys, in the order written; a record is complete when it has at least REQUIRED_KEYS (records
# written before `guarantee` and `warnings` existed stay complete)
METRICS_KEYS = ("algo", "data", "eps", "delta", "seed", "metrics", "privacy", "guarantee", "warnings", "timings",
                "env")
REQUIRED_KEYS = ("algo", "data", "eps", "delta", "seed", "metrics", "privacy", "timings", "env")
FAILED = "failed.json"
ATTEMPT = ".attempt-"
# result files moved in by a swap, metrics.json last: its presence marks the run complete
RESULT_FILES = ("config.yaml", "overrides.yaml", "metrics.csv", "metrics.json")


@contextlib.contextmanager
def writing(where: Path):
    """Turn an OSError (read-only or missing folder, full disk) into a one-line ResultsError naming `where`."""
    try:
        yield
    except OSError as err:
        raise ResultsError(f"cannot write {where}: {err.strerror or err}") from err


def atomic_save(path: Path, save, mode: str = "wb") -> None:
    """Write `path` with `save(open file)` atomically: a temporary file beside it, flushed to disk, then renamed
    over it, so a reader sees the old file or the whole new one; on any failure the temporary is removed and the
    error raised."""
    path, tmp = Path(path), None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(mode, dir=path.parent, delete=False, prefix=f".{path.name}.") as f:
            tmp = f.name
            save(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise


def atomic_write(path: Path, text: str) -> None:
    with writing(path):
        atomic_save(path, lambda f: f.write(text), mode="w")


def _clean(value):
    """JSON-safe numbers: NaN / inf become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def read_record(run_dir: Path) -> tuple[dict | None, str | None]:
    """The run's metrics.json record, or None and why it is not a complete, well-typed record."""
    path = Path(run_dir) / "metrics.json"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, "no metrics.json"
    except OSError as err:
        return None, f"metrics.json cannot be read: {err.strerror}"
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as err:
        return None, "metrics.json is empty" if not text.strip() else f"metrics.json is truncated or not JSON ({err})"
    why = record_problem(rec)
    return (None, why) if why else (rec, None)


def _is_number(v) -> bool:
    return v is None or isinstance(v, int | float) and not isinstance(v, bool)


def record_problem(rec) -> str | None:
    """Why a metrics.json record cannot be used (missing keys, wrong types), or None."""
    if not isinstance(rec, dict):
        return f"metrics.json holds a {type(rec).__name__}, not an object"
    missing = [k for k in REQUIRED_KEYS if k not in rec]
    if missing:
        return f"metrics.json lacks {', '.join(missing)}"
    checks = [(k, rec[k], isinstance(rec[k], str), "a string") for k in ("algo", "data")]
    checks += [(k, rec[k], _is_number(rec[k]), "a number") for k in ("eps", "delta")]
    checks.append(("seed", rec["seed"], isinstance(rec["seed"], int) and not isinstance(rec["seed"], bool),
                   "an integer"))
    checks += [(k, rec[k], isinstance(rec[k], dict), "an object") for k in ("metrics", "privacy")]
    if "guarantee" in rec:
        checks.append(("guarantee", rec["guarantee"], isinstance(rec["guarantee"], str), "a string"))
    for key, value, ok, kind in checks:
        if not ok:
            return f"{key} is {value!r}, not {kind}"
    numbers = [(f"metrics.{k}", v) for k, v in rec["metrics"].items()]
    numbers += [(f"privacy.{k}", rec["privacy"].get(k)) for k in ("eps_spent", "delta_spent")]
    for key, value in numbers:
        if not _is_number(value):
            return f"{key} is {value!r}, not a number"
    return None


def is_complete(run_dir: Path) -> bool:
    return read_record(run_dir)[0] is not None


def write_failure(run_dir: Path, err: BaseException, job: list[str] | None = None) -> Path | None:
    """Record why a run failed in its folder (`failed.json`: error type, message, traceback, overrides), beside
    any complete result of an earlier attempt, which stays. Best effort: None when the folder cannot be written
    (the run's own error is the one to report)."""
    import datetime
    import traceback

    record = {"error": type(err).__name__, "message": str(err).strip(),
              "overrides": list(job or []), "time": datetime.datetime.now().isoformat(timespec="seconds"),
              "traceback": "".join(traceback.format_exception(err))}
    path = Path(run_dir) / FAILED
    try:
        atomic_write(path, json.dumps(record, indent=2) + "\n")
    except ResultsError:
        return None
    return path


def _runs(root: Path, name: str) -> list[Path]:
    """The files `name` under `root`, outside hidden folders (attempts in progress, Hydra's and submitit's)."""
    root = Path(root)
    return [p for p in sorted(root.rglob(name)) if not any(part.startswith(".") for part in
                                                            p.parent.relative_to(root).parts)]


def complete_runs(root: Path) -> list[Path]:
    return [p.parent for p in _runs(root, "metrics.json") if is_complete(p.parent)]


def failures(root: Path) -> list[dict]:
    """The failure records under `root`, each with its run folder and `kept`: whether the folder still holds a
    complete result of an earlier attempt."""
    out = []
    for path in _runs(root, FAILED):
        try:
            rec = json.loads(path.read_text())
        except (ValueError, OSError):  # JSONDecodeError and UnicodeDecodeError (a binary file) are ValueErrors
            rec = None
        if not isinstance(rec, dict):
            rec = {"error": "unreadable", "message": f"{path} is not a failure record (not JSON text)"}
        out.append(rec | {"run_dir": str(path.parent), "kept": is_complete(path.parent)})
    return out


def write_synthetic(frame, folder: Path) -> Path:
    """A generator's released table as `synthetic.csv.gz` in the run's artifacts folder (written atomically)."""
    import gzip
    import io

    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    path = Path(folder) / "synthetic.csv.gz"
    atomic_save(path, lambda f: f.write(gzip.compress(buffer.getvalue().encode(), mtime=0)))
    return path


def write_run(run_dir: Path, config_yaml: str, record: dict, overrides: list[str] | None = None) -> None:
    """config.yaml, overrides.yaml, metrics.csv, then metrics.json last: its presence marks the run complete."""
    assert set(REQUIRED_KEYS) <= set(record), f"metrics.json needs the keys {REQUIRED_KEYS}"
    run_dir = Path(run_dir)
    atomic_write(run_dir / "config.yaml", config_yaml)
    atomic_write(run_dir / "overrides.yaml", "".join(f"- {line}\n" for line in overrides or []))
    row = {k: record[k] for k in ("algo", "data", "eps", "delta", "seed")} | record["metrics"]
    row |= {"eps_spent": record["privacy"]["eps_spent"], "delta_spent": record["privacy"]["delta_spent"]}
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(row))
    writer.writeheader()
    writer.writerow(_clean(row))
    atomic_write(run_dir / "metrics.csv", buf.getvalue())
    atomic_write(run_dir / "metrics.json", json.dumps(_clean(record), indent=2) + "\n")


class Attempt:
    """`with Attempt(run_dir) as attempt:` stage a new result in `attempt.dir` (plugins write into
    `attempt.artifacts`), then `attempt.commit(...)` swaps it in; leaving the block removes the staging folder,
    so an attempt that raises leaves the folder as it was."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / f"{ATTEMPT}{socket.gethostname()}-{os.getpid()}"
        self.artifacts = self.dir / "artifacts"

    def __enter__(self) -> Attempt:
        with writing(self.run_dir):
            for stale in self.run_dir.glob(f"{ATTEMPT}*"):
                if stale == self.dir or _abandoned(stale.name):
                    shutil.rmtree(stale, ignore_errors=True)
            self.artifacts.mkdir(parents=True)
        return self

    def commit(self, config_yaml: str, record: dict, overrides: list[str] | None = None) -> None:
        write_run(self.dir, config_yaml, record, overrides)
        with writing(self.run_dir), _signals_deferred():
            _swap(self.dir, self.run_dir)

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _abandoned(name: str) -> bool:
    """Whether an attempt folder was left by a process of this host that no longer runs (killed mid-run)."""
    host, _, pid = name.removeprefix(ATTEMPT).rpartition("-")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    return False


@contextlib.contextmanager
def _signals_deferred():
    """SIGINT / SIGTERM wait until the block is done (a swap cut half-way would leave no complete result)."""
    import signal

    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _swap(staged: Path, run_dir: Path) -> None:
    (run_dir / "metrics.json").unlink(missing_ok=True)  # the old result stops counting as complete first
    old = run_dir / "artifacts"
    if old.exists():
        os.replace(old, staged / "artifacts.old")  # removed with the staging folder
    new = staged / "artifacts"
    if any(new.iterdir()):
        os.replace(new, old)
    (run_dir / FAILED).unlink(missing_ok=True)
    for name in RESULT_FILES:
        os.replace(staged / name, run_dir / name)


def collect(root: Path):
    """One row per complete run under `root`: identity columns, the guarantee when recorded, the swept config
    keys, every metric. `df.attrs["skipped"]` lists `(run folder, why)` for each metrics.json left out."""
    import pandas as pd

    rows, skipped = [], []
    for path in _runs(root, "metrics.json"):
        rec, why = read_record(path.parent)
        if rec is None:
            skipped.append((str(path.parent), why))
            continue
        row = {k: rec[k] for k in ("algo", "data", "eps", "delta", "seed")}
        if "guarantee" in rec:
            row["guarantee"] = rec["guarantee"]
        try:
            row |= _overrides(path.parent)
        except (ValueError, OSError):  # a binary or unreadable overrides.yaml: this run's swept keys are unknown
            skipped.append((str(path.parent), "overrides.yaml is not readable text"))
            continue
        row |= {k: (float("nan") if v is None else v) for k, v in rec["metrics"].items()}
        row |= {"eps_spent": rec["privacy"].get("eps_spent"), "run_dir": str(path.parent)}
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs["skipped"] = skipped
    return df


IDENTITY = ("algo", "data", "eps", "delta", "seed")
_SKIP_OVERRIDES = {"algo", "data", "eps", "delta", "seed", "device", "overwrite"}


def _overrides(run_dir: Path) -> dict:
    """Swept keys other than the identity ones, from the job's overrides (`overrides.yaml`; in folders written
    before it existed, Hydra's `.hydra/overrides.yaml`)."""
    path = run_dir / "overrides.yaml"
    if not path.is_file():
        path = run_dir / ".hydra" / "overrides.yaml"
    out = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            item = line.lstrip("- ").strip().strip("'\"")
            if "=" in item and not item.startswith(("hydra", "+experiment", "experiment")):
                key, value = item.split("=", 1)
                if key.lstrip("+") not in _SKIP_OVERRIDES:
                    out[key.lstrip("+")] = value
    return out


def summarise(df, metrics: list[str] | None = None):
    """mean and std over seeds per (algo, data, eps, other swept keys)."""
    import pandas as pd

    keys = [c for c in df.columns if c in ("algo", "data", "eps", "delta") or c not in
            set(IDENTITY) | {"run_dir", "eps_spent"} and not pd.api.types.is_numeric_dtype(df[c])]
    if metrics is None:
        metrics = [c for c in df.columns if c not in keys and c not in ("seed", "run_dir")
                   and pd.api.types.is_numeric_dtype(df[c])]
    grouped = df.groupby(keys, dropna=False, sort=True)
    out = grouped[metrics].agg(["mean", "std"])
    out.columns = [f"{m}_{stat}" for m, stat in out.columns]
    out.insert(0, "runs", grouped.size())
    return out.reset_index()
