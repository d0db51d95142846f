"""Prepared tables of Zhang's correlated-DP chapter (crfs.md §6, Step 0 of §1): identifier and free-text columns
dropped, categoricals label-encoded (one column per attribute, levels in sorted order: a schema fact of these public
benchmark tables), missing values median- (numeric) or mode- (categorical) imputed, then every feature scaled by the
card's declared `features.numeric` bounds (the algorithms map [0, 1] to [-1, 1]).

Card keys read here (besides the generic ones): `source` (`csv`, default: the card's files through the generic
reader; `kaggle_csv`: one CSV with a header, empty fields kept; `sklearn_breast_cancer`: scikit-learn's bundled
WDBC copy, no file),
`drop` (columns left out), `categorical` (columns label-encoded), `missing_values` (the markers of a missing value,
e.g. "" or "-1"), `original_columns` (the column count of the source table, Table 3.3's first column), `theta0`
(the correlation threshold the chapter uses on this table, crfs.md §0.1; the plugins' `theta0: null` reads it).

Every row keeps its per-feature missing mask in `meta["row_missing"]` (Step 2's missing-fraction rule needs it
after imputation).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from privfair_cli import datasets
from privfair_cli.datasets import tabular
from privfair_cli.errors import DataError

SOURCES = ("csv", "kaggle_csv", "sklearn_breast_cancer")
# The discrete view is always derived from the declared features (one column each, as the chapter encodes them),
# never read from a card's `discrete:` section, so a view that rewrites that section (the enumerable view,
# datasets/views.py) cannot apply to these tables (schema.derivable_views).
CARD_DISCRETE = False


def read(paths, card) -> pd.DataFrame:
    source = card.get("source", "csv")
    if source == "sklearn_breast_cancer":
        from sklearn.datasets import load_breast_cancer

        bunch = load_breast_cancer()
        df = pd.DataFrame(bunch.data, columns=[str(c).replace(" ", "_") for c in bunch.feature_names])
        df.insert(0, "diagnosis", np.where(bunch.target == 0, "M", "B"))  # sklearn: 0 = malignant
        df.insert(0, "id", np.arange(len(df)))  # the UCI file's ID column (not in sklearn's copy)
        return df
    if source == "kaggle_csv":  # one headed CSV whose last column may be empty (Titanic's Embarked)
        try:
            return pd.read_csv(paths[0], dtype=str, keep_default_na=False, on_bad_lines="error")
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
            raise DataError(f"{paths[0]}: malformed file ({str(err).strip().splitlines()[-1]})") from None
    if source != "csv":
        raise DataError(f"data={card['name']}: source={source!r}; allowed: {', '.join(SOURCES)}")
    return tabular.read(paths, dict(card, format=dict(card.get("format") or {}, missing="drop")))


def encode(raw: pd.DataFrame, card) -> datasets.Table:
    df = raw.drop(columns=[c for c in card.get("drop") or [] if c in raw.columns]).reset_index(drop=True)
    label = card["label"]
    numeric = (card.get("features") or {}).get("numeric") or {}
    cols = list(numeric)
    datasets._require(df, cols + [label], card, "feature/label")
    markers = {str(m) for m in card.get("missing_values") or []}
    categorical = set(card.get("categorical") or [])
    missing = np.zeros((len(df), len(cols)), bool)
    for j, col in enumerate(cols):
        raw_col = df[col].astype(str).str.strip()
        miss = raw_col.isin(markers).to_numpy()
        missing[:, j] = miss
        if col in categorical:
            levels = sorted(raw_col[~miss].unique(), key=_level_key)
            codes = raw_col.map({lv: float(i) for i, lv in enumerate(levels)}).to_numpy(float, copy=True)
            codes[miss] = np.nan
            fill = pd.Series(codes[~miss]).mode().iloc[0] if (~miss).any() else 0.0
        else:
            codes = pd.to_numeric(raw_col.where(~raw_col.isin(markers)), errors="coerce").to_numpy(float)
            if np.isnan(codes[~miss]).any():
                bad = raw_col[~miss][np.isnan(codes[~miss])].iloc[0]
                raise DataError(f"data={card['name']}: column {col} holds {bad!r}, not a number (declare it "
                                "`categorical` or a `missing_values` marker)")
            fill = float(np.median(codes[~miss])) if (~miss).any() else 0.0
        df[col] = np.where(np.isnan(codes), fill, codes)
    table = datasets.encode(df[cols + [label]], dict(card, sensitive=None, discrete=None))
    table.meta["row_missing"] = missing
    table.meta["original_columns"] = int(card.get("original_columns") or raw.shape[1])
    if card.get("theta0") is not None:
        table.meta["theta0"] = float(card["theta0"])
    return table


def _level_key(value: str):
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)
