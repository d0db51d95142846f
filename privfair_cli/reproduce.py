"""`privfair reproduce NAME`: run a paper-table experiment and compare it cell by cell with the published numbers.

The experiment config (`configs/experiment/NAME.yaml`) holds the sweep (`hydra.sweeper.params`) and a
`reproduce:` block that maps the published table onto our runs (see docs/reproducing.md).
Runs land in `results/reproduce/NAME/runs/` and are resumed (complete runs are skipped); the comparison goes to
`results/reproduce/NAME/comparison.{csv,md}`. A run that fails is recorded in its folder and its cells show
`not_run`; the others are compared.

Verdict of a cell: `match` when |ours - published| <= tolerance, with
`tolerance = max(floor, 2 sqrt(std_pub^2 + std_ours^2) / sqrt(runs))` (two standard errors of the difference
of means when both sides average `runs` runs); `deviates` otherwise; `substitute` where our dataset stands in for
one that is not public; `not_run` where no run matched the cell.

An experiment may declare `without_cuda: skip` (GPU-only) or `without_cuda: [overrides]` (the cells that fit a
CPU, e.g. `["data=adult,dutch"]`, quoted so YAML keeps the comma), applied when no CUDA device is visible.

Optional keys for tables whose `setting` column names variants and groups: a `datasets` value may be a list of
cards, told apart by a setting mapped in `settings`; `values: {setting key: {published value: our value}}`
translates a setting's values before matching; `metric_suffix: {setting key: {published value: suffix}}`
appends a suffix to our metric key (e.g. `group=female` -> `accuracy_s0`).
"""

from __future__ import annotations

import fnmatch
import importlib
import math
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from privfair_cli import results
from privfair_cli.errors import ConfigError

COLUMNS = ["table", "dataset", "algorithm", "setting", "metric", "published_mean", "published_std", "ours_mean",
           "ours_std", "deviation", "tolerance", "verdict", "reason"]
RESULTS_ROOT = Path("results")  # outputs, relative to the working directory like every run folder


def published_dir() -> Path:
    from privfair_cli.config import config_dir

    checkout = config_dir().parent / "results" / "published"
    return checkout if checkout.is_dir() else Path(__file__).resolve().parent / "published"


def experiment_spec(name: str) -> dict:
    from privfair_cli.config import config_dir

    path = config_dir() / "experiment" / f"{name}.yaml"
    spec = OmegaConf.to_container(OmegaConf.load(path), resolve=False).get("reproduce")
    if not spec:
        raise ConfigError(f"experiment {name!r} has no `reproduce:` block")
    for key in ("published", "table", "datasets", "metrics"):
        if key not in spec:
            raise ConfigError(f"experiment {name}: reproduce.{key} is missing")
    return spec


def parse_setting(setting: str) -> dict[str, str]:
    out = {}
    for part in str(setting).split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def _same(value, wanted: str) -> bool:
    try:
        return math.isclose(float(value), float(wanted), rel_tol=1e-9, abs_tol=1e-12)
    except (TypeError, ValueError):
        return str(value) == wanted


def _reason(spec: dict, algorithm: str, dataset: str, metric: str) -> str:
    for pattern, text in (spec.get("reasons") or {}).items():
        if fnmatch.fnmatch(f"{algorithm}|{dataset}|{metric}", pattern):
            return text
    return ""


def compare(runs: pd.DataFrame, published: pd.DataFrame, spec: dict) -> pd.DataFrame:
    tables = spec["table"] if isinstance(spec["table"], list) else [spec["table"]]
    algos = spec.get("algorithms") or {}
    pub = published[published["table"].isin(tables) & published["dataset"].isin(spec["datasets"])
                    & published["metric"].isin(spec["metrics"])]
    if algos:
        pub = pub[pub["algorithm"].isin(algos)]
    floors = spec.get("floors") or {}
    settings = spec.get("settings") or {}
    translate = spec.get("values") or {}  # {setting key: {published value: our value}}
    suffixes = spec.get("metric_suffix") or {}  # {setting key: {published value: suffix of our metric key}}
    substitutes = set(spec.get("substitute") or [])
    rows = []
    for r in pub.itertuples(index=False):
        ours_algo = algos.get(r.algorithm, r.algorithm)
        cards = spec["datasets"][r.dataset]  # one card, or a list told apart by a setting (e.g. variant)
        cards = cards if isinstance(cards, list) else [cards]
        sel = runs[(runs["algo"] == ours_algo) & runs["data"].isin(cards)] if not runs.empty else runs
        setting = parse_setting(r.setting)
        for key, value in setting.items():
            if key not in settings or value in ("inf", "∞") or sel.empty:
                continue
            value = str((translate.get(key) or {}).get(value, value))
            col = "cfg." + settings[key]
            sel = sel[[_same(v, value) for v in sel[col]]] if col in sel else sel.iloc[0:0]
        metric = spec["metrics"][r.metric] + "".join(
            str((table or {}).get(setting.get(key), "")) for key, table in suffixes.items())
        values = sel[metric].dropna() if metric in sel else pd.Series(dtype=float)
        n = len(values)
        mean = float(values.mean()) if n else float("nan")
        std = float(values.std(ddof=1)) if n > 1 else float("nan")
        pub_std = 0.0 if pd.isna(r.std) else float(r.std)
        tol = max(float(floors.get(r.metric, 0.01)),
                  2 * math.sqrt(pub_std**2 + (0.0 if math.isnan(std) else std) ** 2) / math.sqrt(max(n, 1)))
        dev = mean - float(r.mean) if n else float("nan")
        if not n:
            verdict = "not_run"
        elif r.dataset in substitutes:
            verdict = "substitute"
        else:
            verdict = "match" if abs(dev) <= tol else "deviates"
        reason = _reason(spec, r.algorithm, r.dataset, r.metric) if verdict != "match" else ""
        rows.append([r.table, r.dataset, r.algorithm, r.setting, r.metric, float(r.mean), r.std, mean, std,
                     dev, tol, verdict, reason])
    return pd.DataFrame(rows, columns=COLUMNS)


def collect_runs(run_root: Path, spec: dict) -> pd.DataFrame:
    runs = results.collect(run_root)
    if runs.empty:
        return runs
    for path in (spec.get("settings") or {}).values():
        runs["cfg." + path] = [OmegaConf.select(OmegaConf.load(Path(d) / "config.yaml"), path)
                               for d in runs["run_dir"]]
    return runs


def without_cuda(spec: dict, overrides: list[str]) -> list[str] | None:
    """The overrides to use on a machine without CUDA: the experiment's `without_cuda` overrides (e.g. its census
    cells only) under the user's own, or None when it declares `without_cuda: skip` (GPU-only tables)."""
    import torch

    rule = spec.get("without_cuda")
    if rule is None or torch.cuda.is_available():
        return overrides
    if rule == "skip":
        return None
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    return [o for o in rule if o.split("=", 1)[0].lstrip("+~") not in given] + list(overrides)


def reproduce(name: str, overrides: list[str], run: bool = True) -> pd.DataFrame | None:
    from privfair_cli.report import markdown
    from privfair_cli.sweep import run_inprocess

    spec = experiment_spec(name)
    out = RESULTS_ROOT / "reproduce" / name
    failed: list[str] = []
    if run:
        effective = without_cuda(spec, overrides)
        if effective is None:
            print(f"skip {name}: it needs a CUDA GPU at the paper's size (`privfair run -m experiment={name}` forces "
                  f"it on this machine)")
            return None
        if effective != overrides:
            print(f"{name}: no CUDA device, running the CPU cells only ({' '.join(effective)})")
        failed = run_inprocess([f"experiment={name}", *effective], out / "runs").failed
    runs = collect_runs(out / "runs", spec)
    published = pd.read_csv(published_dir() / spec["published"])
    comparison = compare(runs, published, spec)
    results.atomic_write(out / "comparison.csv", comparison.to_csv(index=False, float_format="%.4f"))
    results.atomic_write(out / "comparison.md", f"# {name}: ours vs published\n\n" + markdown(
        comparison.round(4).astype(object).where(comparison.notna(), "")))
    if spec.get("figure"):
        module, func = spec["figure"].split(":")
        getattr(importlib.import_module(module), func)(runs, comparison, out)
    _print(name, comparison)
    comparison.attrs["failed"] = failed  # run folders whose run raised (their cells are not_run)
    return comparison


def _print(name: str, comparison: pd.DataFrame) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{name}: ours vs published")
    cols = ["dataset", "algorithm", "setting", "metric", "published", "ours", "deviation", "tolerance", "verdict"]
    for c in cols:
        table.add_column(c)
    colour = {"match": "green", "deviates": "red", "substitute": "yellow", "not_run": "dim"}
    for r in comparison.itertuples(index=False):
        pub = f"{r.published_mean:.4f}" + ("" if pd.isna(r.published_std) else f" ± {r.published_std:.4f}")
        ours = "–" if np.isnan(r.ours_mean) else f"{r.ours_mean:.4f}" + (
            "" if np.isnan(r.ours_std) else f" ± {r.ours_std:.4f}")
        table.add_row(r.dataset, r.algorithm, r.setting, r.metric, pub, ours, f"{r.deviation:+.4f}",
                      f"{r.tolerance:.4f}", f"[{colour[r.verdict]}]{r.verdict}[/]")
    console = Console(width=160)
    console.print(table)
    counts = comparison["verdict"].value_counts().to_dict()
    console.print(", ".join(f"{k}: {v}" for k, v in counts.items()))
