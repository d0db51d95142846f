"""`adult_pc`: UCI Adult discretised for the causal-discovery case study (Xu thesis 4.6.3; privpc.md §6).

All 48,842 records (`adult.data` + `adult.test`), rows with missing values ("?") kept; the trailing "." of the
test file's income is stripped. Each attribute is coded into 2-4 categories by the card's `discrete:` section
(the thesis does not give its scheme; the card holds the spec's recommended one). p = 14: the card's `drop`
column (default `fnlwgt`; `education-num` is the other plausible reading) is left out of the graph.
"""

from __future__ import annotations

import pandas as pd

from privfair_cli.datasets import encode as card_encode
from privfair_cli.datasets import read_csv_strict
from privfair_cli.errors import DataError

from .adult import COLUMNS


def read(paths, card) -> pd.DataFrame:
    frames = []
    for path in paths:
        df = read_csv_strict(path, expected_cols=len(COLUMNS), header=None, names=COLUMNS, skipinitialspace=True,
                             skiprows=1 if path.name.endswith(".test") else 0, dtype=str, keep_default_na=False)
        df["income"] = df["income"].str.rstrip(".")
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    if card.get("rows") and len(df) != card["rows"]:
        raise DataError(f"adult_pc: {len(df)} rows, the card expects {card['rows']}")
    return df


def encode(df: pd.DataFrame, card):
    drop = card.get("drop", "fnlwgt")
    if drop not in card["discrete"]:
        raise DataError(f"data.drop={drop!r} must name one of the discretised columns: {list(card['discrete'])}")
    return card_encode(df, card | {"discrete": {k: v for k, v in card["discrete"].items() if k != drop}})
