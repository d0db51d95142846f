"""COMPAS (ProPublica `compas-scores-two-years.csv`) in the FairML layout PreFair uses (prefair.md §8.2).

The standard ProPublica filter (|days_b_screening_arrest| <= 30, is_recid != -1, c_charge_degree != 'O',
score_text != 'N/A') leaves 6,172 rows. Columns as in `propublica_data_for_fairml.csv`: Two_yr_Recidivism,
Number_of_Priors, score_factor (score_text Medium/High), Age_Above_FourtyFive, Age_Below_TwentyFive, Sex,
Misdemeanor (charge degree M) and Race (the FairML dummies collapsed: 0 Caucasian, 1 African-American, 2 Asian,
3 Hispanic, 4 Native American, 5 Other).

A card with `layout: aif360_small` gets AIF360's `load_preproc_data_compas` instead (ffpdg.md §6.2): the same
filter plus race in {African-American, Caucasian} (5,278 rows), columns sex, race, age_cat (<25, 25-45, >45),
priors_count (0, 1-3, >3), c_charge_degree (F, M) and two_year_recid, as strings the card's `discrete:` codes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from privfair_cli.datasets import read_csv_strict
from privfair_cli.errors import DataError

RACE_CODES = {"Caucasian": 0, "African-American": 1, "Asian": 2, "Hispanic": 3, "Native American": 4, "Other": 5}


def read(paths, card) -> pd.DataFrame:
    raw = read_csv_strict(paths[0])
    keep = (raw["days_b_screening_arrest"].between(-30, 30) & (raw["is_recid"] != -1)
            & (raw["c_charge_degree"] != "O") & (raw["score_text"] != "N/A"))
    if card.get("layout") == "aif360_small":
        return small(raw[keep & raw["race"].isin(["African-American", "Caucasian"])].reset_index(drop=True))
    df = raw[keep].reset_index(drop=True)
    out = pd.DataFrame({
        "Two_yr_Recidivism": df["two_year_recid"].astype(int),
        "Number_of_Priors": df["priors_count"].astype(int),
        "score_factor": df["score_text"].isin(["Medium", "High"]).astype(int),
        "Age_Above_FourtyFive": (df["age"] > 45).astype(int),
        "Age_Below_TwentyFive": (df["age"] < 25).astype(int),
        "Sex": df["sex"].astype(str),
        "Misdemeanor": (df["c_charge_degree"] == "M").astype(int),
        "Race": df["race"].map(RACE_CODES),
    })
    if out["Race"].isna().any():
        raise DataError(f"compas: unknown race value(s) {sorted(set(df['race']) - set(RACE_CODES))}")
    out["Race"] = out["Race"].astype(np.int64)
    return out


AGE_CATS = {"Less than 25": "<25", "25 - 45": "25-45", "Greater than 45": ">45"}


def small(df: pd.DataFrame) -> pd.DataFrame:
    """AIF360's small COMPAS domain (`load_preproc_data_compas`), one string column per attribute."""
    priors = df["priors_count"].astype(int)
    return pd.DataFrame({
        "sex": df["sex"].astype(str),
        "race": df["race"].astype(str),
        "age_cat": df["age_cat"].map(AGE_CATS).astype(str),
        "priors_count": np.where(priors == 0, "0", np.where(priors <= 3, "1-3", ">3")),
        "c_charge_degree": df["c_charge_degree"].astype(str),
        "two_year_recid": df["two_year_recid"].astype(int).astype(str),
    })
