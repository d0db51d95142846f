"""`privfair report PATH`: mean ± std over seeds per (algo, data, eps, guarantee, other swept keys), and with
`--plot eps` the privacy-utility-fairness trade-off plot: the main metrics against eps (or any other swept key),
one line per algorithm (and value of the other swept keys), a band of ± one standard deviation over seeds, one
column per dataset.

A metrics.json that cannot be used (truncated, not JSON, missing keys, a value of the wrong type) is left out
with one line naming its run folder and why; so is each failed run. The `guarantee` column appears when the
records carry one (eps-DP, (eps,delta)-DP, zCDP, heuristic, none)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from privfair_cli import results
from privfair_cli.errors import PrivfairError, ResultsError
from privfair_cli.tools import plots, tables

MAIN_METRICS = ("accuracy", "risk_difference", "dtpr", "dfpr", "tvd_1way", "tvd_2way", "edge_tpr", "edge_fpr",
                "edge_tdr", "edge_fdr", "shd", "eps_spent")


# metrics plotted by default, those of these the runs have (classifiers, data releases, graphs)
PLOT_METRICS = ("accuracy", "risk_difference", "tvd_2way", "edge_tpr", "edge_fdr")


def report(path: Path, metrics: list[str] | None = None, plot: str | None = None) -> pd.DataFrame:
    from rich.console import Console
    from rich.table import Table

    given = metrics is not None
    if not Path(path).is_dir():
        raise ResultsError(f"{path} is not a folder")
    df = results.collect(path)
    say_left_out(path, df.attrs["skipped"], results.failures(path))
    if df.empty:
        raise ResultsError(f"no complete runs (metrics.json) under {path}")
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
        display[m] = [tables.mean_std(a, b) for a, b in zip(summary[f"{m}_mean"], summary[f"{m}_std"], strict=True)]
    results.atomic_write(Path(path) / "summary.md", tables.table(display.columns, display.itertuples(index=False)))
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
        plots.tradeoff(summary, plot, shown or metrics, out)
        print(f"wrote {out}")
    return summary


def say_left_out(path: Path, skipped: list[tuple[str, str]], failed: list[dict]) -> None:
    """Name every run the report leaves out and why; a failed re-run whose earlier result is kept, once."""
    for run_dir, why in skipped:
        print(f"skipped {run_dir}: {why}")
    for f in failed:
        if f.get("error") == "unreadable":
            print(f"unreadable failure record: {f['message']}")
    lost = [f["run_dir"] for f in failed if not f["kept"]]
    kept = [f["run_dir"] for f in failed if f["kept"]]
    for what, dirs in (("failed and are left out", lost), ("failed on a re-run and keep their earlier result", kept)):
        if dirs:
            print(f"{len(dirs)} run(s) under {path} {what} (failed.json): "
                  + ", ".join(dirs[:3]) + (" ..." if len(dirs) > 3 else ""))
