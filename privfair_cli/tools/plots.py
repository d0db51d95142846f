"""Every figure privfair draws: one matplotlib helper (`figure`), the figure kinds an experiment config selects
for `privfair reproduce`, the trade-off plot of `privfair report --plot`, and the per-run artifact plots.

`privfair report --plot KEY --by-group` adds `by_group`: each group's accuracy and TPR against KEY, with the spread
over seeds and the mean within-run bootstrap interval (docs/groups.md).

Figure kinds of an experiment (`reproduce.figure` in `configs/experiment/<name>.yaml`, one mapping or a list):

    figure: {_target_: privfair_cli.tools.plots.ours_vs_published, file: figure.png, metrics: [TPR, FPR, TDR]}

Each kind is called as `kind(runs, comparison, out_dir, name=<experiment>, **params)` after the comparison is
built; `runs` holds one row per run (with `cfg.<path>` columns for the `settings` paths), `comparison` the cells
(with `our_metric`, the metric key behind each cell). The kinds:

- `ours_vs_published`: per published metric, ours against published (mean ± std), one colour per algorithm, the
  diagonal dashed. Params: `metrics` (default: every metric of the comparison), `file`.
- `bars_vs_published`: per published metric, bars of ours per value of the setting `x` and per algorithm, the
  published value as a black tick. Params: `x` (a setting key, e.g. eps), `metrics` ({published metric: panel
  title}), `log` (metrics drawn on a log scale), `title`, `file`.
- `metric_vs`: metrics (rows) against a run column `x` (e.g. `cfg.algo.eps_f_ratio`), mean ± std band over the
  runs per algorithm, one column per dataset; `reference` ({metric: {y, label}}) adds horizontal lines.
- `run_curves`: per dataset, per-epoch columns of a per-run artifact (e.g. DP-SGD's `curves.csv`) for the first
  seed of every algorithm. Params: `artifact`, `x`, `columns` ({column: title}), `groups` (the groups to draw
  when present, e.g. MNIST's compared classes), `file`.
- `epoch_history`: per dataset, per-epoch columns of the runs' `history.csv` (validation / test), mean over seeds
  per algorithm, drawn and written as CSV. Params: `columns` ({column: title}), `sets`, `lr`, `file`, `csv`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pandas as pd

from privfair_cli.errors import PrivfairError

DPI = 110
PANEL = (4.2, 3.2)  # inches per panel (width, height)


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (runs have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def figure(path: Path, rows: int = 1, cols: int = 1, panel: tuple[float, float] = PANEL, title: str = "",
           dpi: int = DPI, legend_below: bool = False, tight: bool = True, legend_right: bool = False, **subplots):
    """A figure with a rows x cols grid of axes (always 2-D), saved to `path` and closed on leaving the block.
    `legend_below`: one legend under the panels, from the first panel's labels. `legend_right`: one legend right of
    the panels with every label of every panel once (the saved image grows to hold it, none is clipped).
    `tight=False` keeps the axes' own limits and crops the saved image to its content (e.g. a graph drawing)."""
    plt = pyplot()
    fig, axes = plt.subplots(rows, cols, figsize=(panel[0] * cols, panel[1] * rows), squeeze=False, **subplots)
    try:
        yield fig, axes
        bottom = 0.0
        if legend_below:
            handles, labels = axes[0, 0].get_legend_handles_labels()
            fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
            bottom = 0.04 + 0.03 * ((len(labels) - 1) // 4)
        if title:
            fig.suptitle(title, fontsize=10)
        if tight:
            fig.tight_layout(rect=(0, bottom, 1, 1))
        if legend_right:
            seen: dict[str, object] = {}
            for ax in axes.flat:
                for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                    seen.setdefault(label, handle)
            fig.legend(list(seen.values()), list(seen), loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
                       frameon=False, ncol=1 + len(seen) // 30)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi, bbox_inches=None if tight and not legend_right else "tight")
    finally:
        plt.close(fig)


# ---------------------------------------------------------------------------------------------- report
STYLES = ("-", "-.", ":")  # with the 10 colours: 30 lines told apart (dashed is for the non-private baselines)
MARKERS = ("o", "s", "^")
MAX_LINES = 10  # more lines than this on one dataset: one column per family of algorithms (`families`)


def tradeoff(summary: pd.DataFrame, x: str, metrics: list[str], path: Path, reference: dict | None = None,
             title: str = "", families: dict[str, str] | None = None):
    """Each metric (rows) against `x` per dataset (columns) from a summary (`results.summarise`): mean line and
    ± std band per algorithm and value of the other swept keys that vary within an algorithm. Lines differ in
    colour, then line style and marker; one legend right of the panels, one y-scale per metric (row). A
    non-private line (`guarantee` none) and a line measured at a single x are drawn dashed across the panel, the
    baseline the private lines are read against. `families` ({algo: family}): with more than MAX_LINES lines on a
    dataset, one column per (dataset, family), the baselines of that dataset in each. `reference`: {metric: {y,
    label}} lines; `title` goes before the run count. Returns the figure after saving it."""
    keys = [c for c in summary.columns if not c.endswith(("_mean", "_std")) and c != "runs"]
    if x not in keys or not pd.api.types.is_numeric_dtype(summary[x]):
        allowed = [k for k in keys if pd.api.types.is_numeric_dtype(summary[k])]
        raise PrivfairError(f"--plot {x}: not a numeric swept key of these runs; allowed: {', '.join(allowed)}")
    other = (x, "data", "algo", "guarantee")  # the guarantee is what the runs give, not a swept key: no line of its own
    within = summary.groupby(["algo", "data"], sort=False)
    series = ["algo"] + [k for k in keys if k not in other and (within[k].nunique(dropna=False) > 1).any()]
    xs = summary[x].astype(float)
    log_x = bool((xs > 0).all() and xs.max() / xs.min() >= 100)
    ident = summary[series].astype(str).agg(" | ".join, axis=1)  # one line per algorithm and other swept values
    styles = {name: {"color": f"C{i % 10}", "ls": STYLES[i // 10 % 3], "marker": MARKERS[i // 10 % 3]}
              for i, name in enumerate(sorted(ident.unique()))}
    baseline = (summary["guarantee"].astype(str).eq("none") if "guarantee" in summary
                else pd.Series(False, summary.index))
    family = summary["algo"].map(families or {}).fillna("") if families else pd.Series("", summary.index)
    columns = []  # (dataset, family or "") per column of panels
    for dataset in sorted(summary["data"].unique()):
        on = summary["data"] == dataset
        split = families and ident[on].nunique() > MAX_LINES
        columns += [(dataset, f) for f in sorted(family[on & ~baseline].unique())] if split else [(dataset, "")]
    lo, hi = int(summary["runs"].min()), int(summary["runs"].max())
    with figure(path, len(metrics), len(columns), panel=(4.2, 2.9), dpi=130, legend_right=True, sharex=True,
                sharey="row", title=f"{title}mean ± std over seeds ({lo if lo == hi else f'{lo}-{hi}'} runs a point)"
                ) as (fig, axes):
        for j, (dataset, fam) in enumerate(columns):
            sub = summary[(summary["data"] == dataset) & (baseline | (family == fam) if fam else True)]
            for name, line in sub.groupby(ident[sub.index], sort=True):
                flat = bool(baseline[line.index].all()) or line[x].nunique() == 1
                _draw_line(axes[:, j], line.sort_values(x), x, metrics, series, styles[name], flat)
        for i, metric in enumerate(metrics):
            for j, (dataset, fam) in enumerate(columns):
                ax = axes[i, j]
                ax.grid(alpha=0.3)
                if log_x:
                    ax.set_xscale("log")
                if xs.nunique() == 1:  # one budget: a window around it, not matplotlib's 0-1
                    v = float(xs.iloc[0])
                    ax.set_xlim(*((v / 3, v * 3) if log_x or v > 0 else (v - 1, v + 1)))
                    ax.set_xticks([v])
                if i == 0:
                    ax.set_title(f"{dataset}: {fam}" if fam else str(dataset))
                if i == len(metrics) - 1:
                    ax.set_xlabel(x.removeprefix("cfg."))
                if j == 0:
                    ax.set_ylabel(metric.replace("_", " "))
                if metric in (reference or {}):
                    line = reference[metric]
                    ax.axhline(float(line["y"]), color="grey", ls="--", lw=1, label=line.get("label"))
    return fig


def _draw_line(column, line: pd.DataFrame, x: str, metrics: list[str], series: list[str], style: dict,
               flat: bool) -> None:
    """One line on each metric's panel; `flat`: a non-private baseline or a line at one x, drawn as a dashed
    horizontal line at its mean over x (band: its mean std), marked where it was measured."""
    first = line.iloc[0]
    label = str(first["algo"]) + "".join(f", {k}={first[k]}" for k in series if k != "algo")
    if flat:
        label += " (non-private)" if first.get("guarantee") == "none" else f" (one {x})"
    for ax, metric in zip(column, metrics, strict=True):
        mean, std = line[f"{metric}_mean"].to_numpy(float), line[f"{metric}_std"].fillna(0).to_numpy(float)
        if flat:
            level, spread = float(np.nanmean(mean)), float(np.nanmean(std))
            ax.axhline(level, color=style["color"], ls="--", lw=1.2, label=label)
            ax.axhspan(level - spread, level + spread, color=style["color"], alpha=0.10, lw=0)
            ax.plot(line[x], mean, ls="none", marker=style["marker"], ms=3, color=style["color"])
        else:
            ax.plot(line[x], mean, ms=3, label=label, **style)
            ax.fill_between(line[x], mean - std, mean + std, color=style["color"], alpha=0.18, lw=0)


GROUP_PLOT_RATES = {"accuracy": "accuracy", "tpr": "TPR"}  # what by_group draws per group


def by_group(groups: pd.DataFrame, x: str, path: Path, rates: dict[str, str] = GROUP_PLOT_RATES):
    """Each group's `rates` (rows) against `x`, one column per algorithm, dataset and value of the other swept
    keys, from a per-group summary (report.group_summary): the mean over seeds as a line, its std over seeds as
    error bars, and the mean within-run 95 % bootstrap interval as a band; the reference group drawn dashed."""
    keys = [c for c in groups.columns if not c.endswith(("_mean", "_std")) and c != "runs"]
    if x not in keys or not pd.api.types.is_numeric_dtype(groups[x]):
        allowed = [k for k in keys if pd.api.types.is_numeric_dtype(groups[k])]
        raise PrivfairError(f"--plot {x}: not a numeric swept key of these runs; allowed: {', '.join(allowed)}")
    rates = {r: title for r, title in rates.items() if f"{r}_mean" in groups.columns}
    other = (x, "guarantee", "attribute", "group", "reference")
    panel_keys = ["algo", "data"] + [k for k in keys if k not in (*other, "algo", "data")
                                     and groups[k].nunique(dropna=False) > 1]
    panels = groups[panel_keys].astype(str).agg(", ".join, axis=1)
    names = list(dict.fromkeys(panels.sort_values()))
    labels = list(dict.fromkeys(groups["group"].astype(str)))
    colours = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    xs = groups[x].astype(float)
    log_x = bool((xs > 0).all() and xs.max() / xs.min() >= 100)
    with figure(path, len(rates), len(names), panel=(4.2, 2.9), dpi=130, legend_below=True, sharex=True,
                sharey="row", title="each group: mean over seeds (error bars: std over seeds; band: mean within-run "
                                    "95 % bootstrap interval)") as (fig, axes):
        for j, name in enumerate(names):
            sub = groups[panels == name]
            for label, line in sub.groupby(sub["group"].astype(str), sort=False):
                line = line.sort_values(x)
                dashed = (line.get("reference", pd.Series([""])) == "yes").any()
                for i, rate in enumerate(rates):
                    ax = axes[i, j]
                    mean, std = line[f"{rate}_mean"].to_numpy(float), line[f"{rate}_std"].fillna(0).to_numpy(float)
                    ax.errorbar(line[x], mean, yerr=std, marker="o", ms=3, capsize=2, color=colours[label],
                                ls="--" if dashed else "-", label=label + (" (reference)" if dashed else ""))
                    low, high = (f"{rate}_ci_{b}_mean" for b in ("low", "high"))
                    if low in line and high in line:
                        ax.fill_between(line[x], line[low], line[high], color=colours[label], alpha=0.12, lw=0)
            for i, rate in enumerate(rates):
                ax = axes[i, j]
                ax.grid(alpha=0.3)
                if log_x:
                    ax.set_xscale("log")
                if i == 0:
                    ax.set_title(name, fontsize=9)
                if i == len(rates) - 1:
                    ax.set_xlabel(x.removeprefix("cfg."))
                if j == 0:
                    ax.set_ylabel(rates[rate])
    return fig


# ---------------------------------------------------------------------------------------------- reproduce
def ours_vs_published(runs, comparison: pd.DataFrame, out_dir: Path, name: str, metrics: list[str] | None = None,
                      file: str = "figure.png") -> None:
    """Ours against published per metric (mean ± std over runs), the diagonal dashed."""
    shown = [m for m in (metrics or list(dict.fromkeys(comparison["metric"]))) if (comparison["metric"] == m).any()]
    if not shown:
        return
    with figure(Path(out_dir) / file, 1, len(shown), panel=(4.2, 4),
                title=f"{name}: ours vs published (mean ± std over runs)") as (_, axes):
        for ax, metric in zip(axes[0], shown, strict=True):
            cells = comparison[comparison["metric"] == metric]
            for algo, grp in cells.groupby("algorithm"):
                ax.errorbar(grp["published_mean"], grp["ours_mean"], xerr=grp["published_std"].fillna(0),
                            yerr=grp["ours_std"].fillna(0), fmt="o", capsize=2, label=algo, alpha=0.8)
            lims = [0, max(1.0, float(np.nanmax(cells[["published_mean", "ours_mean"]].to_numpy())) * 1.05)]
            ax.plot(lims, lims, color="grey", lw=0.8, ls="--")
            ax.set_xlim(lims)
            ax.set_ylim(lims)
            ax.set_xlabel(f"published {metric}")
            ax.set_ylabel(f"ours ({cells['our_metric'].iloc[0]})")
            ax.legend(fontsize=7)


def _setting(setting: str, key: str) -> str | None:
    for part in str(setting).split(";"):
        k, _, v = part.partition("=")
        if k.strip() == key:
            return v.strip()
    return None


def bars_vs_published(runs, comparison: pd.DataFrame, out_dir: Path, name: str, x: str, metrics: dict[str, str],
                      log: list[str] | None = None, title: str = "", file: str = "figure.png") -> None:
    """Per metric, bars of ours (mean over runs) per value of setting `x` and per algorithm; published values as
    black ticks."""
    cells = comparison.assign(_x=[_setting(s, x) for s in comparison["setting"]]).dropna(subset=["_x"])
    xs = sorted(cells["_x"].unique(), key=float)
    algos = list(dict.fromkeys(cells["algorithm"]))
    width = 0.8 / max(len(algos), 1)
    with figure(Path(out_dir) / file, 1, len(metrics), panel=(4, 3.6), title=title or f"{name}: ours (bars) vs "
                "published (black ticks)") as (_, axes):
        for ax, (metric, panel_title) in zip(axes[0], metrics.items(), strict=True):
            for k, algo in enumerate(algos):
                sel = cells[(cells["algorithm"] == algo) & (cells["metric"] == metric)].set_index("_x")
                pos = np.arange(len(xs)) + (k - (len(algos) - 1) / 2) * width
                ax.bar(pos, [sel["ours_mean"].get(v, np.nan) for v in xs], width, label=algo, color=f"C{k}")
                ax.scatter(pos, [sel["published_mean"].get(v, np.nan) for v in xs], color="black", marker="_",
                           s=200, zorder=3)
            ax.set_xticks(np.arange(len(xs)), [f"{x}={v}" for v in xs])
            ax.set_title(panel_title)
            if metric in (log or []):
                ax.set_yscale("log")
        axes[0, 0].legend(fontsize=8)


def run_summary(runs: pd.DataFrame, keys: list[str], metrics: list[str], csv: Path | None = None) -> pd.DataFrame:
    """Mean, std and count of `metrics` over the runs per value of `keys` (one row each); `csv`: also written."""
    grouped = runs.groupby(keys, sort=True, dropna=False)
    summary = grouped[metrics].agg(["mean", "std"])
    summary.columns = [f"{m}_{stat}" for m, stat in summary.columns]
    summary.insert(0, "runs", grouped.size())
    summary = summary.reset_index()
    if csv is not None:
        Path(csv).parent.mkdir(parents=True, exist_ok=True)
        summary.to_csv(csv, index=False, float_format="%.6g")
    return summary


def metric_vs(runs: pd.DataFrame, comparison, out_dir: Path, name: str, x: str, metrics: list[str],
              reference: dict | None = None, file: str = "figure.png", by: list[str] | None = None,
              csv: str | None = None) -> None:
    """`metrics` against the run column `x`, mean ± std over the runs per algorithm (the trade-off plot); `by`:
    further run columns that make lines of their own (e.g. `cfg.algo.model`); `csv`: also write the plotted
    summary (one row per line and x) beside the figure."""
    if runs.empty:
        return
    summary = run_summary(runs, ["algo", "data", *(by or []), x], metrics, Path(out_dir) / csv if csv else None)
    tradeoff(summary, x, metrics, Path(out_dir) / file, reference, title=f"{name}: ")


def run_bars(runs: pd.DataFrame, comparison, out_dir: Path, name: str, x: str, metrics: list[str],
             by: str | None = None, file: str = "figure.png", csv: str | None = None) -> None:
    """Bars of each metric (rows) per dataset (columns): one group of bars per value of the run column `x` (e.g.
    the algorithm), one bar per value of `by`, height the mean and whisker the std over the runs; `csv`: also
    write that summary beside the figure."""
    if runs.empty:
        return
    keys = ["data", x] + ([by] if by else [])
    summary = run_summary(runs, keys, metrics, Path(out_dir) / csv if csv else None)
    datasets = sorted(summary["data"].unique())
    xs = list(dict.fromkeys(runs[x]))
    bys = sorted(summary[by].astype(str).unique()) if by else [""]
    width = 0.8 / len(bys)
    lo, hi = int(summary["runs"].min()), int(summary["runs"].max())
    with figure(Path(out_dir) / file, len(metrics), len(datasets), panel=(4.2, 2.9),
                title=f"{name}: mean ± std over seeds ({lo if lo == hi else f'{lo}-{hi}'} runs a bar)") as (_, axes):
        for j, dataset in enumerate(datasets):
            sub = summary[summary["data"] == dataset]
            for i, metric in enumerate(metrics):
                ax = axes[i, j]
                for k, b in enumerate(bys):
                    sel = (sub[sub[by].astype(str) == b] if by else sub).set_index(x)
                    pos = np.arange(len(xs)) + (k - (len(bys) - 1) / 2) * width
                    ax.bar(pos, [sel[f"{metric}_mean"].get(v, np.nan) for v in xs], width, color=f"C{k}",
                           yerr=[sel[f"{metric}_std"].get(v, np.nan) for v in xs], capsize=2,
                           label=f"{by.removeprefix('cfg.')}={b}" if by else None)
                ax.set_xticks(np.arange(len(xs)), [str(v) for v in xs], fontsize=7)
                ax.grid(alpha=0.3, axis="y")
                if i == 0:
                    ax.set_title(str(dataset))
                if j == 0:
                    ax.set_ylabel(metric.replace("_", " "))
        if by:
            axes[0, 0].legend(fontsize=7)


def run_curves(runs: pd.DataFrame, comparison, out_dir: Path, name: str, columns: dict[str, str],
               artifact: str = "curves.csv", x: str = "epoch", groups: list[str] | None = None,
               file: str = "curves.png") -> None:
    """Per dataset (rows) and artifact column (panels), `x` against the column for each group of the first seed
    of every algorithm (log scale). `groups`: draw only these groups when a run has them all."""
    if runs.empty:
        return
    first = runs.sort_values("seed").groupby(["data", "algo"], sort=True).head(1)
    datasets = sorted(first["data"].unique())
    with figure(Path(out_dir) / file, len(datasets), len(columns), panel=(5, 3.2), dpi=100) as (_, axes):
        for row, dataset in zip(axes, datasets, strict=True):
            for r in first[first["data"] == dataset].itertuples(index=False):
                path = _artifact(Path(r.run_dir), artifact)
                if path is None:
                    continue
                df = pd.read_csv(path)
                present = set(df["group"])
                for g in groups if groups and set(groups) <= present else sorted(present):
                    sub = df[df["group"] == g]
                    for ax, col in zip(row, columns, strict=True):
                        ax.plot(sub[x], sub[col], label=f"{r.algo} {g}")
            for ax, title in zip(row, columns.values(), strict=True):
                ax.set_title(f"{dataset}: {title}", fontsize=9)
                ax.set_xlabel(x)
                ax.set_yscale("log")
            row[0].legend(fontsize=6, ncol=2)


def epoch_history(runs: pd.DataFrame, comparison, out_dir: Path, name: str, columns: dict[str, str],
                  sets: tuple[str, ...] = ("test",), lr: dict | None = None, file: str = "curves.png",
                  csv: str = "curves.csv", label_by: str = "sigma") -> None:
    """Per dataset (rows) and history column (panels), the per-epoch curves of the runs' `history.csv` (DP-SGD's
    per-epoch validation / test history), mean over seeds per algorithm (and noise multiplier) and watched set,
    with the curves also written to `csv`. `lr` ({algorithm: learning rate}) keeps only the runs of each
    algorithm at its own rate (a sweep over `algo.lr`; needs `settings: {lr: algo.lr}`). `label_by`: the `algo` key
    that tells the private runs apart in the legend (default sigma; e.g. C for a sweep at a fixed sigma * C)."""
    if runs.empty:
        return
    frames = []
    for run in runs.to_dict("records"):
        if lr and run["algo"] in lr and not np.isclose(float(run.get("cfg.algo.lr", np.nan)), lr[run["algo"]]):
            continue
        path = _artifact(Path(run["run_dir"]), "history.csv")
        if path is None:
            continue
        df = pd.read_csv(path)
        sigma = run.get(f"cfg.algo.{label_by}")
        label = run["algo"] + ("" if run["algo"] == "sgd" or sigma is None else f" {label_by}={sigma}")
        for split in sets:
            cols = {f"{split}_{c}": c for c in columns if f"{split}_{c}" in df}
            part = df[["epoch", *cols]].rename(columns=cols)
            part.insert(0, "series", f"{label} {split}" if len(sets) > 1 else label)
            part.insert(0, "data", run["data"])
            frames.append(part)
    if not frames:
        return
    long = pd.concat(frames, ignore_index=True)
    curves = long.groupby(["data", "series", "epoch"], sort=True).agg(["mean", "std", "count"])
    curves.columns = [f"{c}_{stat}" for c, stat in curves.columns]
    curves = curves.reset_index()
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    curves.to_csv(Path(out_dir) / csv, index=False, float_format="%.6g")
    datasets = sorted(curves["data"].unique())
    with figure(Path(out_dir) / file, len(datasets), len(columns), panel=(4.2, 3.0), title=name) as (_, axes):
        for row, dataset in zip(axes, datasets, strict=True):
            sub = curves[curves["data"] == dataset]
            for series, line in sub.groupby("series", sort=True):
                for ax, col in zip(row, columns, strict=True):
                    if f"{col}_mean" in line:
                        ax.plot(line["epoch"], line[f"{col}_mean"], label=series, lw=1)
            for ax, title in zip(row, columns.values(), strict=True):
                ax.set_title(f"{dataset}: {title}", fontsize=9)
                ax.set_xlabel("epoch")
            row[0].legend(fontsize=6)


def _artifact(run_dir: Path, name: str) -> Path | None:
    """A run's artifact file: in its `artifacts/` folder, or (older runs) in the run folder itself."""
    for path in (run_dir / "artifacts" / name, run_dir / name):
        if path.is_file():
            return path
    return None


# ---------------------------------------------------------------------------------------------- run artifacts
def curves(df: pd.DataFrame, path: Path, title: str = "", stops: pd.DataFrame | None = None) -> None:
    """Per-group average loss and gradient norm (and clipping bound, when adaptive) per epoch (thesis Figures
    9.1 / 9.2 / 9.4 style). `stops` (dpsgd_es's `stops.csv`: rule, fairness, stop_epoch): a dotted vertical line
    at each epoch where a stopping rule stopped, labelled with the rules that stopped there."""
    cols = ["avg_loss", "avg_grad_norm"] + (["avg_clip_bound"] if "avg_clip_bound" in df else [])
    marks = {} if stops is None else {int(e): sorted(set(g["rule"])) for e, g in stops.groupby("stop_epoch")}
    with figure(path, 1, len(cols), title=title, legend_right=bool(marks)) as (_, axes):
        for ax, col in zip(axes[0], cols, strict=True):
            for group, g in df.groupby("group", sort=False):
                ax.plot(g["epoch"], g[col], label=f"group {group}")
            for k, (epoch, rules) in enumerate(marks.items()):
                shown = ", ".join(rules[:3]) + (f" +{len(rules) - 3}" if len(rules) > 3 else "")
                ax.axvline(epoch, color=f"C{(k + 2) % 10}", ls=":", lw=1.2, label=f"stop at epoch {epoch}: {shown}")
            ax.set_xlabel("epoch")
            ax.set_ylabel(col.replace("_", " "))
        if not marks:
            axes[0, 0].legend(fontsize=7)


FIGURE_ARTIFACTS = ("curves.csv", "graph.json")  # what `artifact_figures` draws from


def run_figures(folder: Path, context: str) -> list[Path]:
    """A run's figures, where its plugin saved something to draw (`FIGURE_ARTIFACTS`); the runner's `draw`."""
    if not any((Path(folder) / name).is_file() for name in FIGURE_ARTIFACTS):
        return []
    return artifact_figures(folder, context)


def artifact_figures(folder: Path, context: str) -> list[Path]:
    """The figures of one run, drawn from the artifacts its plugin saved (algorithms draw nothing): `curves.png`
    from DP-SGD's `curves.csv`, `graph.png` from the PC family's `graph.json`. `context` says what ran (algorithm,
    data, eps, seed) and goes into every title."""
    import json

    folder, drawn = Path(folder), []
    if (folder / "curves.csv").is_file():
        stops = pd.read_csv(folder / "stops.csv") if (folder / "stops.csv").is_file() else None
        curves(pd.read_csv(folder / "curves.csv", dtype={"group": str}), folder / "curves.png",
               title=f"per-group training diagnostics (non-private): {context}", stops=stops)
        drawn.append(folder / "curves.png")
    if (folder / "graph.json").is_file():
        g = json.loads((folder / "graph.json").read_text())
        truth = None if g["truth"] is None else np.asarray(g["truth"])
        graph(np.asarray(g["cpdag"]), g["nodes"], folder / "graph.png", truth,
              f"{context}: {g['edges']} edges", truth_kind=g.get("truth_kind", "reference"))
        drawn.append(folder / "graph.png")
    return drawn


def graph(A: np.ndarray, names, path: Path, true=None, title: str = "", truth_kind: str = "reference") -> None:
    """A CPDAG on a circle: arrows for directed edges, lines for undirected ones; against a reference skeleton,
    false edges are red and missed true edges dashed grey (a legend says so, naming the reference)."""
    p = len(A)
    ang = 2 * np.pi * np.arange(p) / p
    xy = np.column_stack([np.cos(ang), np.sin(ang)])
    T = None if true is None else (np.asarray(true) != 0) | (np.asarray(true) != 0).T
    with figure(path, panel=(6, 6), tight=False) as (_, axes):
        ax = axes[0, 0]
        for i, j in zip(*np.nonzero(A), strict=True):
            if A[j, i] and i > j:
                continue
            colour = "black" if T is None or T[i, j] else "red"
            style = "-" if A[j, i] else "-|>"
            ax.annotate("", xy=xy[j], xytext=xy[i], arrowprops={"arrowstyle": style, "color": colour,
                                                                "shrinkA": 14, "shrinkB": 14, "lw": 1.4})
        if T is not None:
            for i, j in zip(*np.nonzero(np.triu(T & ~((A != 0) | (A != 0).T), 1)), strict=True):
                ax.plot(*xy[[i, j]].T, ls="--", color="grey", lw=0.8)
        for (u, v), label in zip(xy, names, strict=True):
            ax.text(u, v, label, ha="center", va="center", fontsize=8,
                    bbox={"boxstyle": "circle", "fc": "white", "ec": "black"})
        if T is not None:
            from matplotlib.lines import Line2D

            keys = [("black", "-", f"edge in the {truth_kind}"), ("red", "-", f"edge not in the {truth_kind}"),
                    ("grey", "--", f"{truth_kind} edge missed")]
            ax.legend([Line2D([], [], color=c, ls=ls) for c, ls, _ in keys], [k for *_, k in keys], fontsize=7,
                      loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=3, frameon=False)
        ax.set_xlim(-1.25, 1.25)
        ax.set_ylim(-1.25, 1.25)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title(title, fontsize=9)


def metric_vs_with_csv(runs: pd.DataFrame, comparison, out_dir: Path, name: str, x: str, metrics: list[str],
                       file: str = "figure.png", csv: str = "curves.csv") -> None:
    """`metric_vs`, and the plotted means and stds per algorithm, dataset and `x` as `csv` (the curve data)."""
    if runs.empty:
        return
    present = [m for m in metrics if m in runs]
    summary = run_summary(runs, ["algo", "data", x], present, Path(out_dir) / csv)
    tradeoff(summary, x, present, Path(out_dir) / file, title=f"{name}: ")


def artifact_curves(runs: pd.DataFrame, comparison, out_dir: Path, name: str, artifact: str, x: str,
                    columns: dict[str, str], file: str = "figure.png", csv: str = "curves.csv") -> None:
    """Per dataset (panels in a row per column), `x` against each artifact column, one line per seed of every
    algorithm; the artifacts stacked (with algo, data, seed) as `csv`."""
    if runs.empty:
        return
    frames = []
    for r in runs.sort_values(["data", "algo", "seed"]).itertuples(index=False):
        path = _artifact(Path(r.run_dir), artifact)
        if path is not None:
            frames.append(pd.read_csv(path).assign(algo=r.algo, data=r.data, seed=r.seed))
    if not frames:
        return
    df = pd.concat(frames, ignore_index=True)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    df.to_csv(Path(out_dir) / csv, index=False, float_format="%.6g")
    datasets = sorted(df["data"].unique())
    with figure(Path(out_dir) / file, len(columns), len(datasets), panel=(4, 2.8), dpi=110,
                title=f"{name}") as (_, axes):
        for j, dataset in enumerate(datasets):
            sub = df[df["data"] == dataset]
            for (algo, seed), line in sub.groupby(["algo", "seed"], sort=True):
                for i, col in enumerate(columns):
                    axes[i, j].plot(line[x], line[col], marker="o", ms=2, label=f"{algo} seed {seed}")
            for i, title in enumerate(columns.values()):
                axes[i, j].set_title(f"{dataset}: {title}", fontsize=9)
                axes[i, j].set_xlabel(x)
                axes[i, j].grid(alpha=0.3)
        axes[0, 0].legend(fontsize=6)


def audit_histogram(out_d: np.ndarray, out_d1: np.ndarray, threshold, path: Path, title: str = "",
                    labels: tuple[str, str] = ("D", "D + canary")) -> None:
    """`privfair audit`: the distributions of the audit statistic on the two neighbouring inputs, with the chosen
    threshold (privfair_cli/tools/audit/)."""
    both = np.concatenate([out_d, out_d1])
    both = both[np.isfinite(both)]
    bins = np.histogram_bin_edges(both, bins=40) if both.size and np.ptp(both) > 0 else 10
    with figure(path, panel=(6.4, 3.6), title=title) as (_fig, axes):
        ax = axes[0, 0]
        for values, label, colour in ((out_d, labels[0], "tab:blue"), (out_d1, labels[1], "tab:orange")):
            values = values[np.isfinite(values)]
            ax.hist(values, bins=bins, alpha=0.5, label=f"{label} ({len(values)})", color=colour)
        if threshold is not None:
            ax.axvline(threshold, color="k", linestyle="--", linewidth=1, label="threshold")
        ax.set_xlabel("audit statistic")
        ax.set_ylabel("releases")
        ax.legend(fontsize=8)
