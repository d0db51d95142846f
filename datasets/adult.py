"""UCI Adult: `adult.data` + `adult.test` concatenated, rows with `?` dropped (45,222 rows)."""

from __future__ import annotations

import pandas as pd

from privfair_cli.datasets import read_csv_strict
from privfair_cli.errors import DataError

COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country", "income",
]


def read(paths, card) -> pd.DataFrame:
    frames = []
    for i, path in enumerate(paths):
        df = read_csv_strict(
            path, expected_cols=len(COLUMNS), header=None, names=COLUMNS, skipinitialspace=True,
            skiprows=1 if path.name.endswith(".test") else 0, na_values="?", dtype=str,
        )
        df["income"] = df["income"].str.rstrip(".")
        df["is_test"] = i == 1
        frames.append(df)
    df = pd.concat(frames, ignore_index=True).dropna().reset_index(drop=True)
    expected = card.get("rows")
    if expected and len(df) != expected:
        raise DataError(f"adult: {len(df)} rows after dropping '?', the card expects {expected}")
    return df
