"""The committed record of the runs behind a comparison: `results/reproduce/<experiment>/runs.csv.gz`.

One row per run of the experiment's full sweep: who it is (`run_id`, the run folder under the sweep folder, whose
last part ends in the config's identity hash, also in `config_hash`; `algo`, `data`, `eps`, `delta`, `seed`; the
swept settings: the experiment's `settings` paths as `cfg.<path>` and the job's other overrides), how to run it
again (`overrides`, the job's overrides as a JSON list), where and when it ran (`device`, `machine`: the GPU's name or
`cpu <architecture>`, `threads`, `seeds_batched`: the seeds trained with it as one batched model, `seconds`: its
wall time, `commit`: the checkout that recorded it, `date`), the solver statuses its warnings name (`statuses`),
and every metric the comparison reads (`metric_columns`: the keys the experiment names, checked by comparing with
all of the run's metrics). The canonical comparison is always computed from this record read back (`read`), so
`privfair reproduce NAME --no-run` re-derives it bit for bit.

Written deterministically: rows sorted by `run_id`, columns in a fixed order, floats as Python's shortest
round-trip text, gzip with mtime 0 and no file name, so writing the same runs gives the same bytes.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import platform
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from privfair_cli import results

FILE = "runs.csv.gz"
IDENTITY = ["run_id", "config_hash", "algo", "data", "eps", "delta", "seed"]
PROVENANCE = ["overrides", "device", "machine", "threads", "seeds_batched", "seconds", "commit", "date", "statuses"]
STATUS = re.compile(r"status '([^']*)'|status \"([^\"]*)\"")  # a solver status quoted in a run's warning


def path_of(root: Path) -> Path:
    return Path(root) / FILE


def checkout_commit(where: Path | None = None) -> str:
    """The short commit of the checkout, with `+changes` when its code or configs differ from it; `unknown`
    outside a git checkout."""
    cwd = where or Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "privfair_cli", "algorithms", "datasets",
                                "configs"], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def machine_of(env: dict) -> str:
    """The kind of machine a run's `env` names: the GPU, or `cpu <architecture>` (never a host name)."""
    if env.get("gpu"):
        return str(env["gpu"])
    arch = next((part for part in str(env.get("platform", "")).split("-") if part in
                 ("x86_64", "aarch64", "arm64", "ppc64le", "s390x")), platform.machine())
    return f"cpu {arch}"


def _statuses(rec: dict) -> str:
    return ";".join(sorted({m.group(1) or m.group(2) for w in rec.get("warnings", [])
                            for m in STATUS.finditer(str(w))}))


def row_of(run_dir: Path, sweep_dir: Path, settings: dict[str, str], commit: str) -> dict | None:
    """The record row of one complete run folder (all its metrics; `prune` keeps the read ones), or None."""
    from omegaconf import OmegaConf

    rec, _ = results.read_record(run_dir)
    if rec is None:
        return None
    run_dir = Path(run_dir)
    env = rec.get("env", {})
    overrides = [line.lstrip("- ").strip() for line in (run_dir / "overrides.yaml").read_text().splitlines()
                 if line.strip()] if (run_dir / "overrides.yaml").is_file() else []
    row = {"run_id": run_dir.relative_to(sweep_dir).as_posix(), "config_hash": run_dir.name.rsplit("-", 1)[-1]}
    row |= {k: rec[k] for k in ("algo", "data", "eps", "delta", "seed")}
    if settings:
        cfg = OmegaConf.load(run_dir / "config.yaml")
        row |= {f"cfg.{path}": OmegaConf.select(cfg, path) for path in settings.values()}
    row |= results._overrides(run_dir)
    stamp = datetime.fromtimestamp((run_dir / "metrics.json").stat().st_mtime, UTC)
    row |= {"overrides": json.dumps([o for o in overrides if not o.startswith("experiment=")]),
            "device": env.get("device", ""), "machine": machine_of(env), "threads": env.get("threads"),
            "seeds_batched": " ".join(str(s) for s in env.get("seeds_batched") or []),
            "seconds": (rec.get("timings") or {}).get("total"), "commit": commit,
            "date": stamp.strftime("%Y-%m-%dT%H:%MZ"), "statuses": _statuses(rec)}
    row |= {f"metric.{k}": (float("nan") if v is None else v) for k, v in rec["metrics"].items()}
    return row


def job_of(row) -> list[str]:
    """The overrides that run a recorded run again (without its `experiment=`)."""
    return list(json.loads(row["overrides"])) if row["overrides"] else []


def frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as a record frame: IDENTITY, the settings, PROVENANCE, then the metrics (`metric.<key>`), sorted."""
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=IDENTITY + PROVENANCE)
    metrics = sorted(c for c in df.columns if c.startswith("metric."))
    settings = sorted(c for c in df.columns if c not in IDENTITY + PROVENANCE and c not in metrics)
    return df[IDENTITY + settings + PROVENANCE + metrics].sort_values("run_id", kind="stable").reset_index(drop=True)


def runs_view(record: pd.DataFrame) -> pd.DataFrame:
    """The record as the run table `reproduce.compare` reads: metrics under their own names."""
    return record.rename(columns={c: c.removeprefix("metric.") for c in record.columns if c.startswith("metric.")})


def metric_columns(record: pd.DataFrame) -> list[str]:
    return [c for c in record.columns if c.startswith("metric.")]


def prune(record: pd.DataFrame, keys: set[str], same) -> pd.DataFrame:
    """The record with only the metric columns the comparison reads: those named by `keys` (our metric keys,
    and the metric names the cell functions take), or ending in `_<key>` (a stopping rule's `<rule>_<key>`);
    all of them where `same(pruned)` says the comparison would change without the others."""
    keep = [c for c in metric_columns(record)
            if (k := c.removeprefix("metric.")) in keys or any(k.endswith(f"_{key}") for key in keys)]
    pruned = record.drop(columns=[c for c in metric_columns(record) if c not in keep])
    return pruned if same(pruned) else record


def to_bytes(record: pd.DataFrame) -> bytes:
    text = record.to_csv(index=False, lineterminator="\n")
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as f:
        f.write(text.encode())
    return buffer.getvalue()


def write(record: pd.DataFrame, root: Path) -> Path:
    path = path_of(root)
    with results.writing(path):
        results.atomic_save(path, lambda f: f.write(to_bytes(record)))
    return path


def read(root: Path) -> pd.DataFrame | None:
    """The committed record under `root`, or None where there is none."""
    path = path_of(root)
    if not path.is_file():
        return None
    return from_bytes(path.read_bytes())


TEXT = ("run_id", "config_hash", "overrides", "device", "machine", "seeds_batched", "commit", "date", "statuses")
INTEGER = re.compile(r"-?\d+")


def _typed(values: list[str]) -> list:
    """A column read back: whole numbers as int, other numbers as Python floats (exactly the written ones: the
    text is Python's shortest round-trip form), empty cells as NaN, anything else as text."""
    nan = float("nan")
    if all(v == "" or INTEGER.fullmatch(v) for v in values) and all(values):
        return [int(v) for v in values]
    try:
        return [float(v) if v != "" else nan for v in values]
    except ValueError:
        return [v if v != "" else nan for v in values]


def from_bytes(data: bytes) -> pd.DataFrame:
    rows = list(csv.reader(io.StringIO(gzip.decompress(data).decode())))
    head, body = rows[0], rows[1:]
    columns = {c: ([r[k] for r in body] if c in TEXT else _typed([r[k] for r in body])) for k, c in enumerate(head)}
    return pd.DataFrame(columns, columns=head)


def _same_result(a: pd.Series, b: pd.Series) -> bool:
    """Two rows of one run id hold the same result: every metric both name, and the wall time, are equal."""
    columns = [c for c in a.index.intersection(b.index) if c.startswith("metric.") or c == "seconds"]
    return all((pd.isna(a[c]) and pd.isna(b[c])) or a[c] == b[c] for c in columns)


def merge(old: pd.DataFrame | None, new: pd.DataFrame, keep: set[str] | None = None) -> pd.DataFrame:
    """`new`'s rows, and `old`'s rows of other runs; with `keep` (the run ids of the experiment's sweep now), the
    old rows of runs that are no longer in the sweep are dropped. A new row that is the recorded run read again
    (the same result: its folder merged once more, e.g. by `--no-run`) keeps the recorded row, so the provenance
    (the commit and machine it ran on) is never re-stamped with the checkout that merely read it."""
    if old is None or old.empty:
        return frame(new.to_dict("records"))
    recorded = old.set_index("run_id", drop=False)
    rows = [recorded.loc[r.run_id] if r.run_id in recorded.index and _same_result(recorded.loc[r.run_id], r) else r
            for _, r in new.iterrows()]
    new = pd.DataFrame(rows, columns=list(dict.fromkeys([*new.columns, *old.columns]))) if rows else new
    rest = old[~old["run_id"].isin(set(new["run_id"]))]
    if keep is not None:
        rest = rest[rest["run_id"].isin(keep)]
    return frame(pd.concat([rest, new], ignore_index=True).to_dict("records"))


def summary(record: pd.DataFrame) -> str:
    """`N runs (cpu x86_64: n, ...), commits ..., dates ...`: one line for the docs."""
    if record is None or record.empty:
        return "no run record"
    machines = record.groupby(["device", "machine"], sort=True).size()
    where = ", ".join(f"{m}: {n}" for (_, m), n in machines.items())
    dates = sorted(record["date"])
    return (f"{len(record)} run{'s' * (len(record) != 1)} ({where}), recorded {dates[0][:10]}"
            + (f" to {dates[-1][:10]}" if dates[-1][:10] != dates[0][:10] else "")
            + f", commit {', '.join(sorted(set(record['commit'])))}")
