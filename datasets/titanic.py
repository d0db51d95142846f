"""Titanic (Kaggle `train.csv`): the generic CSV reader refuses a row whose last field is empty (it reads it as a
truncated line), but `Embarked`, the last column, is legitimately empty for two passengers. This reader parses the
file with the 12 named columns, checks every line has them all, and hands the table to the card's `derive:`
(which fills the missing Age and Embarked values)."""

from __future__ import annotations

import pandas as pd

from privfair_cli.datasets import tabular
from privfair_cli.errors import DataError

COLUMNS = ["PassengerId", "Survived", "Pclass", "Name", "Sex", "Age", "SibSp", "Parch", "Ticket", "Fare", "Cabin",
           "Embarked"]


def read(paths, card) -> pd.DataFrame:
    df = pd.read_csv(paths[0], dtype=str, keep_default_na=False, on_bad_lines="error")
    if list(df.columns) != COLUMNS:
        raise DataError(f"{paths[0]}: expected the Kaggle columns {COLUMNS}, found {list(df.columns)}")
    if (df["PassengerId"] == "").any() or (df["Survived"] == "").any():
        raise DataError(f"{paths[0]}: a row without PassengerId or Survived (truncated file?)")
    return tabular.derive(df, card.get("derive") or {}, card["name"])
