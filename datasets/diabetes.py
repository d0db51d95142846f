"""Diabetes 130-US hospitals 1999-2008 (UCI, Strack et al. 2014; `diabetic_data.csv`, 101,766 encounters): the
stand-in for the Heritage Health data of fair_sampling.md §6 (the HHP claims tables the seed's 132 features come
from are not available; ../shared/datasets/heritage_health/PROVENANCE.md).

`age_group` = "70plus" for the age brackets [70-80) and above, else "under70" (the data has 10-year brackets
only, so the seed's split at 65 cannot be drawn; 70 is the nearest bracket edge). `hospital_again` = "yes" when
the encounter was followed by a readmission (`readmitted` <30 or >30), the closest outcome to HHP's
DaysInHospital > 0.
"""

from __future__ import annotations

import numpy as np

from privfair_cli.datasets import read_csv_strict

OLD = ("[70-80)", "[80-90)", "[90-100)")


def read(paths, card):
    df = read_csv_strict(paths[0], expected_cols=50, dtype=str, keep_default_na=False)
    df["age_group"] = np.where(df["age"].isin(OLD), "70plus", "under70")
    df["hospital_again"] = np.where(df["readmitted"].isin(("<30", ">30")), "yes", "no")
    return df
