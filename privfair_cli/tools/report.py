"""`privfair report PATH`: mean ± std over seeds per (algo, data, eps, guarantee, other swept keys), and with
`--plot eps` the privacy-utility-fairness trade-off plot: the main metrics against eps (or any other swept key),
one line per algorithm (and value of the other swept keys), a band of ± one standard deviation over seeds, one
column per dataset.

A metric with a bootstrap interval in the runs (`accuracy_ci_low` / `_ci_high`, metrics.group_metrics) shows
both spreads: `mean ± std [low, high]`, the std over seeds and the mean within-run 95 % interval (the mean of the
runs' lower bounds, the mean of their upper bounds); a signed gap whose mean interval contains 0 is marked `~0`
(an absolute gap when its signed gap's interval does; `equalized_odds_gap` when both dtpr's and dfpr's do).
Runs on an attribute with more than two groups also show its k-group gaps (`<rate>_gap[<attribute>]`).
`by_group`: one table of every group's rates (`summary_groups.csv` / `.md`) and, with `plot`, each group's
accuracy and TPR against the plotted key (`tradeoff_<key>_by_group.png`, plots.by_group).

A metrics.json that cannot be used (truncated, not JSON, missing keys, a value of the wrong type) is left out
with one line naming its run folder and why; so is each failed run. The `guarantee` column appears when the
records carry one (eps-DP, (eps,delta)-DP, zCDP, heuristic, none)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from privfair_cli import results
from privfair_cli.errors import PrivfairError, ResultsError
from privfair_cli.metrics import GROUP_RATES, ci_names
from privfair_cli.tools import plots, tables

MAIN_METRICS = ("accuracy", "risk_difference", "dtpr", "dfpr", "tvd_1way", "tvd_2way", "edge_tpr", "edge_fpr",
                "edge_tdr", "edge_fdr", "shd", "eps_spent")


# metrics plotted by default, those of these the runs have (classifiers, data releases, graphs)
PLOT_METRICS = ("accuracy", "risk_difference", "tvd_2way", "edge_tpr", "edge_fdr")


K_GROUP_GAPS = ("positive_rate", "tpr", "fpr", "accuracy")  # the k-group gaps shown by default
MARK = "~0"  # the mean within-run interval of the (signed) gap contains 0
SIGNED = {"risk_difference_abs": ("risk_difference",), "dtpr_abs": ("dtpr",), "dfpr_abs": ("dfpr",),
          "dfdr_abs": ("dfdr",), "equalized_odds_gap": ("dtpr", "dfpr")}
GROUP_COLUMN = re.compile(r"(?P<name>.+?)\[(?P<label>[^\]]+=[^\]]*)\]")  # `tpr[race=White]`, not `tpr_gap[race]`


def report(path: Path, metrics: list[str] | None = None, plot: str | None = None,
           by_group: bool = False) -> pd.DataFrame:
    given = metrics is not None
    if not Path(path).is_dir():
        raise ResultsError(f"{path} is not a folder")
    df = results.collect(path)
    say_left_out(path, df.attrs["skipped"], results.failures(path))
    if df.empty:
        raise ResultsError(f"no complete runs (metrics.json) under {path}")
    if metrics is None:
        metrics = [m for m in MAIN_METRICS if m in df.columns and df[m].notna().any()] + k_group_gaps(df)
    else:
        unknown = [m for m in metrics if m not in df.columns]
        if unknown:
            raise PrivfairError(f"metric(s) {unknown} not in these runs; available: "
                                f"{', '.join(c for c in df.columns if c not in ('run_dir',))}")
    summary = summarise(df, metrics)
    keys = [c for c in summary.columns if not c.endswith(("_mean", "_std"))]
    results.atomic_write(Path(path) / "summary.csv", summary.to_csv(index=False))
    display = summary[keys].copy()
    for m in metrics:
        display[m] = cells(summary, m)
    show(display, metrics, f"{len(df)} runs under {path}", Path(path) / "summary.md")
    print(f"wrote {Path(path) / 'summary.csv'} and summary.md")
    groups = group_summary(df) if by_group else None
    if groups is not None:
        shown = [c for c in groups.columns if not c.endswith(("_mean", "_std"))]
        table = groups[shown].copy()
        for m in ("n_test", *GROUP_RATES, "positive_rate_vs_ref", "tpr_vs_ref"):
            if f"{m}_mean" in groups.columns:
                table[m] = cells(groups, m)
        results.atomic_write(Path(path) / "summary_groups.csv", groups.to_csv(index=False))
        show(table, [c for c in table.columns if c not in shown], f"every group of {len(df)} runs under {path}",
             Path(path) / "summary_groups.md")
        print(f"wrote {Path(path) / 'summary_groups.csv'} and summary_groups.md")
    elif by_group:
        print(f"no run under {path} measured groups (classifier runs on a card with a sensitive attribute do)")
    if plot:
        shown = metrics if given else [m for m in PLOT_METRICS if m in metrics]
        out = Path(path) / f"tradeoff_{plot}.png"
        lines = summary.groupby("data")["algo"].nunique().max()
        plots.tradeoff(summary, plot, shown or metrics, out,
                       families=families(summary["algo"].unique()) if lines > plots.MAX_LINES else None)
        print(f"wrote {out}")
        if groups is not None:
            out = Path(path) / f"tradeoff_{plot}_by_group.png"
            plots.by_group(groups, plot, out)
            print(f"wrote {out}")
    return summary


def families(algos) -> dict[str, str]:
    """{algo config: the family (module) of the plugin it names}: the trade-off plot's columns when one dataset has
    more lines than fit one panel."""
    from privfair_cli import registry
    from privfair_cli.config import find_config, load_node

    plugins = registry.load_plugins()
    out = {}
    for algo in algos:
        cls = plugins.get(str(load_node("algo", algo).get("name", algo))) if find_config("algo", algo) else None
        out[algo] = registry.info(cls).module if cls else "other"
    return out


def k_group_gaps(df: pd.DataFrame) -> list[str]:
    """The gaps of K_GROUP_GAPS over each attribute the runs measured with more than two groups."""
    out = []
    for col in df.columns:
        attribute = col.removeprefix("positive_rate_gap[").removesuffix("]") if col.startswith(
            "positive_rate_gap[") else None
        labels = [c for c in df.columns if c.startswith("n_test[") and attribute_of(c[7:-1]) == attribute]
        if attribute and len(labels) > 2:
            out += [f"{rate}_gap[{attribute}]" for rate in K_GROUP_GAPS if f"{rate}_gap[{attribute}]" in df.columns]
    return out


def attribute_of(label: str) -> str:
    """`race=White` -> `race`; `sex=Male&race=White` -> `sex&race`."""
    return "&".join(part.split("=", 1)[0] for part in label.split("&"))


def summarise(df: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """results.summarise of `metrics` and of the interval bounds the runs give them (and their signed gaps')."""
    bounds = [b for m in metrics for name in (m, *SIGNED.get(m, ())) for b in ci_names(name) if b in df.columns]
    return results.summarise(df, list(dict.fromkeys(metrics + bounds)))


def _interval(row, metric: str) -> tuple[float, float] | None:
    low, high = (row.get(f"{b}_mean") for b in ci_names(metric))
    return None if low is None or high is None or pd.isna(low) or pd.isna(high) else (low, high)


def marked(row, metric: str) -> bool:
    """Whether the mean within-run interval of the metric's signed gap(s) contains 0 (`MARK`)."""
    base = metric.partition("[")[0]
    signed = SIGNED.get(metric) or ((metric,) if base in ("risk_difference", "dtpr", "dfpr", "dfdr")
                                    or base.endswith("_vs_ref") else ())
    spans = [_interval(row, name) for name in signed]
    return bool(signed) and all(s is not None and s[0] <= 0 <= s[1] for s in spans)


def cells(summary: pd.DataFrame, metric: str) -> list[str]:
    """`mean ± std`, then ` [low, high]` (the mean within-run interval) where the runs give one, then the mark."""
    out = []
    for _, row in summary.iterrows():
        mean, std = row[f"{metric}_mean"], row[f"{metric}_std"]
        text = (tables.mean_std(mean, std) if not metric.startswith("n_test") or pd.isna(mean)
                else f"{mean:.0f}" + ("" if pd.isna(std) else f" ± {std:.0f}"))
        span = _interval(row, metric)
        if span is not None:
            text += f" [{span[0]:.4f}, {span[1]:.4f}]"
        out.append(text + (f" {MARK}" if marked(row, metric) else ""))
    return out


def show(display: pd.DataFrame, metrics: list[str], title: str, markdown: Path) -> None:
    """Print `display` as a rich table, write it as Markdown, and explain the mark where a cell carries it."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    results.atomic_write(markdown, tables.table(display.columns, display.itertuples(index=False)))
    table = Table(title=escape(title))
    for col in display.columns:
        table.add_column(escape(str(col)), justify="right" if col in metrics or col == "runs" else "left")
    for row in display.itertuples(index=False):
        table.add_row(*[escape(str(v)) for v in row])
    Console(width=max(120, 20 * len(display.columns))).print(table)
    if any(str(v).endswith(MARK) for m in metrics for v in display[m]):
        print(f"{MARK}: the mean within-run 95 % bootstrap interval of the gap contains 0 (at this test-set size "
              f"the gap is not distinguishable from 0); [low, high]: that interval, ± the std over seeds")


def group_summary(df: pd.DataFrame) -> pd.DataFrame | None:
    """One row per run setting and group (`attribute`, `group`, `reference`): mean and std over seeds of the
    group's `n_test`, rates, differences to the reference and interval bounds (its `<name>[<group>]` metrics)."""
    found: dict[str, dict[str, str]] = {}
    for col in df.columns:
        match = GROUP_COLUMN.fullmatch(str(col))
        if match:
            found.setdefault(match["label"], {})[match["name"]] = col
    if not found:
        return None
    base = [c for c in df.columns if c in results.IDENTITY or c not in ("run_dir", "eps_spent")
            and not pd.api.types.is_numeric_dtype(df[c])]
    parts = []
    for label, names in found.items():
        part = df[base].copy()
        part["attribute"], part["group"] = attribute_of(label), label
        part["reference"] = "yes" if "reference" in names else ""
        part = part.assign(**{name: df[col] for name, col in names.items() if name != "reference"})
        parts.append(part[part["n_test"].notna()] if "n_test" in part else part)
    long = pd.concat(parts, ignore_index=True)
    long["group"] = pd.Categorical(long["group"], categories=list(found))
    values = [c for c in long.columns if c not in base and c not in ("attribute", "group", "reference")]
    return results.summarise(long, values)


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
