"""Dutch census 2001 (fairness-benchmark version): 60,420 rows, 12 attributes, label `occupation`."""

from __future__ import annotations

from privfair_cli.datasets import read_csv_strict
from privfair_cli.errors import DataError


def read(paths, card):
    df = read_csv_strict(paths[0], expected_cols=12, dtype=str)
    expected = card.get("rows")
    if expected and len(df) != expected:
        raise DataError(f"dutch: {len(df)} rows, the card expects {expected}")
    return df
