"""The tools' text tables: one Markdown table writer and one mean ± std formatter.

`row` writes one Markdown table row, escaping a `|` inside a cell (`\\|`) so that it does not split the cell;
`table` writes a whole GitHub-style table (header, `|---|` rule, rows; a DataFrame `df` is
`table(df.columns, df.itertuples(index=False))`); `mean_std` is the `0.1234 ± 0.0056` of the summaries and
comparisons, `–` where there is no mean."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd


def row(cells: Iterable[object]) -> str:
    """`| a | b |`: one row, each cell as `str`, a `|` inside a cell escaped."""
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def table(head: Sequence[object], rows: Iterable[Iterable[object]]) -> str:
    """A GitHub-style Markdown table: the header `head`, the rule, one line per row; ends in a newline."""
    lines = [row(head), "|" + "|".join("---" for _ in head) + "|"] + [row(r) for r in rows]
    return "\n".join(lines) + "\n"


def mean_std(mean: float | None, std: float | None) -> str:
    """`mean ± std` to 4 decimals; the mean alone when there is no std (one run, none published); `–` when there
    is no mean."""
    if pd.isna(mean):
        return "–"
    return f"{mean:.4f}" if pd.isna(std) else f"{mean:.4f} ± {std:.4f}"
