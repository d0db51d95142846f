"""`adult_pc`: UCI Adult discretised for the causal-discovery case study (Xu thesis 4.6.3; privpc.md §6).

All 48,842 records (`adult.data` + `adult.test`, read by the generic loader as the card says), rows with missing
values ("?") kept as a category; the trailing "." of the test file's income is stripped (card `derive`). Each
attribute is coded into 2-4 categories by the card's `discrete:` section (the thesis does not give its scheme;
the card holds the spec's recommended one). p = 14: the card's `drop` column (default `fnlwgt`; `education-num`
is the other plausible reading) is left out of the graph, which is why this card needs its own `encode`.
"""

from __future__ import annotations

import pandas as pd

from privfair_cli.datasets import encode as card_encode
from privfair_cli.errors import DataError


def encode(df: pd.DataFrame, card):
    drop = card.get("drop", "fnlwgt")
    if drop not in card["discrete"]:
        raise DataError(f"data.drop={drop!r} must name one of the discretised columns: {list(card['discrete'])}")
    return card_encode(df, card | {"discrete": {k: v for k, v in card["discrete"].items() if k != drop}})
