"""Run folders: atomic writes of config / metrics, completeness checks for resumable sweeps, failure records,
aggregation.

A run folder is complete when `metrics.json` holds every key of METRICS_KEYS (it is written last). A run that
raised leaves `failed.json` (error, traceback, time) and no metrics; a run cut off half-way leaves neither. Both
are run again by the next sweep over the same folder, and a run that starts again first removes what the last
attempt left."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from pathlib import Path

import pandas as pd

METRICS_KEYS = ("algo", "data", "eps", "delta", "seed", "metrics", "privacy", "guarantee", "warnings", "timings",
                "env")


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, prefix=f".{path.name}.") as tmp:
        tmp.write(text)
        tmp.flush()
        os.fsync(tmp.fileno())
    os.replace(tmp.name, path)


def _clean(value):
    """JSON-safe numbers: NaN / inf become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def is_complete(run_dir: Path) -> bool:
    path = Path(run_dir) / "metrics.json"
    if not path.is_file():
        return False
    try:
        return set(json.loads(path.read_text())) == set(METRICS_KEYS)
    except (json.JSONDecodeError, OSError):
        return False


def clear_run(run_dir: Path) -> None:
    """Forget a previous attempt's outcome before running again (its metrics, or its failure record)."""
    for name in ("metrics.json", "metrics.csv", FAILED):
        (Path(run_dir) / name).unlink(missing_ok=True)


FAILED = "failed.json"


def write_failure(run_dir: Path, err: BaseException, job: list[str] | None = None) -> Path:
    """Record why a run failed in its folder (`failed.json`): error type, message, traceback, overrides."""
    import datetime
    import traceback

    record = {"error": type(err).__name__, "message": str(err).strip(),
              "overrides": list(job or []), "time": datetime.datetime.now().isoformat(timespec="seconds"),
              "traceback": "".join(traceback.format_exception(err))}
    path = Path(run_dir) / FAILED
    (Path(run_dir) / "metrics.json").unlink(missing_ok=True)
    atomic_write(path, json.dumps(record, indent=2) + "\n")
    return path


def failures(root: Path) -> list[dict]:
    """The failure records under `root`, each with its run folder."""
    out = []
    for path in sorted(Path(root).rglob(FAILED)):
        try:
            out.append(json.loads(path.read_text()) | {"run_dir": str(path.parent)})
        except (json.JSONDecodeError, OSError):
            out.append({"error": "unreadable", "message": str(path), "run_dir": str(path.parent)})
    return out


def write_run(run_dir: Path, config_yaml: str, record: dict) -> None:
    """config.yaml, metrics.csv, then metrics.json last: its presence marks the run complete."""
    assert tuple(record) == METRICS_KEYS, f"metrics.json keys must be {METRICS_KEYS}"
    run_dir = Path(run_dir)
    atomic_write(run_dir / "config.yaml", config_yaml)
    row = {k: record[k] for k in ("algo", "data", "eps", "delta", "seed")} | record["metrics"]
    row |= {"eps_spent": record["privacy"]["eps_spent"], "delta_spent": record["privacy"]["delta_spent"]}
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(row))
    writer.writeheader()
    writer.writerow(_clean(row))
    atomic_write(run_dir / "metrics.csv", buf.getvalue())
    atomic_write(run_dir / "metrics.json", json.dumps(_clean(record), indent=2) + "\n")


def collect(root: Path) -> pd.DataFrame:
    """One row per complete run under `root`: identity columns, the swept config keys, every metric."""
    rows = []
    for path in sorted(Path(root).rglob("metrics.json")):
        if not is_complete(path.parent):
            continue
        rec = json.loads(path.read_text())
        row = {k: rec[k] for k in ("algo", "data", "eps", "delta", "seed")}
        row |= {f"cfg.{k}": v for k, v in rec.get("swept", {}).items()}
        row |= _overrides(path.parent)
        row |= {k: (float("nan") if v is None else v) for k, v in rec["metrics"].items()}
        row |= {"eps_spent": rec["privacy"]["eps_spent"], "run_dir": str(path.parent)}
        rows.append(row)
    return pd.DataFrame(rows)


IDENTITY = ("algo", "data", "eps", "delta", "seed")
_SKIP_OVERRIDES = {"algo", "data", "eps", "delta", "seed", "device", "overwrite"}


def _overrides(run_dir: Path) -> dict:
    """Swept keys other than the identity ones, from Hydra's record of the job's overrides."""
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


def summarise(df: pd.DataFrame, metrics: list[str] | None = None) -> pd.DataFrame:
    """mean and std over seeds per (algo, data, eps, other swept keys)."""
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
