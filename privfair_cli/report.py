"""`privfair report PATH`: mean ± std over seeds per (algo, data, eps, other swept keys), and with `--plot eps`
the privacy-utility-fairness trade-off plot: the main metrics against eps (or any other swept key), one line per
algorithm (and value of the other swept keys), a band of ± one standard deviation over seeds, one column per
dataset."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from privfair_cli import results
from privfair_cli.errors import PrivfairError

MAIN_METRICS = ("accuracy", "risk_difference", "dtpr", "dfpr", "tvd_1way", "tvd_2way", "edge_tpr", "edge_fpr",
                "edge_tdr", "edge_fdr", "shd", "eps_spent")


def _fmt(mean: float, std: float) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "–"
    return f"{mean:.4f}" if std is None or math.isnan(std) else f"{mean:.4f} ± {std:.4f}"


# metrics plotted by default, those of these the runs have (classifiers, data releases, graphs)
PLOT_METRICS = ("accuracy", "risk_difference", "tvd_2way", "edge_tpr", "edge_fdr")


def report(path: Path, metrics: list[str] | None = None, plot: str | None = None) -> pd.DataFrame:
    from rich.console import Console
    from rich.table import Table

    given = metrics is not None
    df = results.collect(path)
    failed = results.failures(path)
    if failed:
        print(f"{len(failed)} failed run(s) under {path} are left out (failed.json): "
              + ", ".join(f["run_dir"] for f in failed[:3]) + (" ..." if len(failed) > 3 else ""))
    if df.empty:
        raise PrivfairError(f"no complete runs (metrics.json) under {path}")
    if metrics is None:
        metrics = [m for m in MAIN_METRICS if m in df.columns and df[m].notna().any()]
    else:
        unknown = [m for m in metrics if m not in df.columns]
        if unknown:
            raise PrivfairError(f"metric(s) {unknown} not in these runs; available: "
                                f"{', '.join(c for c in df.columns if c not in ('run_dir',))}")
    summary = results.summarise(df, metrics)
    keys = [c for c in summary.columns if not c.endswith(("_mean", "_std"))]
    results.atomic_write(Path(path) / "summary.csv", summary.to_csv(index=False))
    display = summary[keys].copy()
    for m in metrics:
        display[m] = [_fmt(a, b) for a, b in zip(summary[f"{m}_mean"], summary[f"{m}_std"], strict=True)]
    results.atomic_write(Path(path) / "summary.md", markdown(display))
    table = Table(title=f"{len(df)} runs under {path}")
    for col in display.columns:
        table.add_column(str(col), justify="right" if col in metrics or col == "runs" else "left")
    for row in display.itertuples(index=False):
        table.add_row(*[str(v) for v in row])
    Console(width=max(120, 20 * len(display.columns))).print(table)
    print(f"wrote {Path(path) / 'summary.csv'} and summary.md")
    if plot:
        shown = metrics if given else [m for m in PLOT_METRICS if m in metrics]
        out = Path(path) / f"tradeoff_{plot}.png"
        plot_tradeoff(summary, plot, shown or metrics, out)
        print(f"wrote {out}")
    return summary


def plot_tradeoff(summary: pd.DataFrame, x: str, metrics: list[str], out: Path):
    """Each metric (rows) against `x` per dataset (columns): mean line and ± std band per algorithm and value of
    the other swept keys. A line measured at a single x (a non-private baseline run at one eps) is drawn
    dashed across the panel. Returns the figure after saving it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [c for c in summary.columns if not c.endswith(("_mean", "_std")) and c != "runs"]
    if x not in keys or not pd.api.types.is_numeric_dtype(summary[x]):
        allowed = [k for k in keys if pd.api.types.is_numeric_dtype(summary[k])]
        raise PrivfairError(f"--plot {x}: not a numeric swept key of these runs; allowed: {', '.join(allowed)}")
    datasets = sorted(summary["data"].unique())
    series = ["algo"] + [k for k in keys if k not in (x, "data", "algo") and summary[k].nunique(dropna=False) > 1]
    fig, axes = plt.subplots(len(metrics), len(datasets), figsize=(4.2 * len(datasets), 2.9 * len(metrics)),
                             squeeze=False, sharex=True)
    xs = summary[x].astype(float)
    log_x = bool((xs > 0).all() and xs.max() / xs.min() >= 100)
    ident = summary[series].astype(str).agg(" | ".join, axis=1)  # one line per algorithm and other swept values
    colours = {name: f"C{i % 10}" for i, name in enumerate(sorted(ident.unique()))}
    for j, dataset in enumerate(datasets):
        sub = summary[summary["data"] == dataset]
        for name, line in sub.groupby(ident[sub.index], sort=True):
            line = line.sort_values(x)
            first = line.iloc[0]
            label = str(first["algo"]) + "".join(f", {k}={first[k]}" for k in series if k != "algo")
            colour = colours[name]
            for i, metric in enumerate(metrics):
                ax = axes[i, j]
                mean, std = line[f"{metric}_mean"].to_numpy(float), line[f"{metric}_std"].fillna(0).to_numpy(float)
                if len(line) == 1:
                    ax.axhline(mean[0], color=colour, ls="--", lw=1.2, label=f"{label} (one {x})")
                    ax.axhspan(mean[0] - std[0], mean[0] + std[0], color=colour, alpha=0.12, lw=0)
                else:
                    ax.plot(line[x], mean, marker="o", ms=3, color=colour, label=label)
                    ax.fill_between(line[x], mean - std, mean + std, color=colour, alpha=0.18, lw=0)
    for i, metric in enumerate(metrics):
        for j, dataset in enumerate(datasets):
            ax = axes[i, j]
            ax.grid(alpha=0.3)
            if log_x:
                ax.set_xscale("log")
            if i == 0:
                ax.set_title(str(dataset))
            if i == len(metrics) - 1:
                ax.set_xlabel(x)
            if j == 0:
                ax.set_ylabel(metric.replace("_", " "))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    lo, hi = int(summary["runs"].min()), int(summary["runs"].max())
    fig.suptitle(f"mean ± std over seeds ({lo if lo == hi else f'{lo}-{hi}'} runs a point)", fontsize=9)
    fig.tight_layout(rect=(0, 0.04 + 0.03 * ((len(labels) - 1) // 4), 1, 1))
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return fig


def markdown(df: pd.DataFrame) -> str:
    """A GitHub-style Markdown table (no extra dependency)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"
