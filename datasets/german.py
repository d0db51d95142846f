"""Statlog German credit (UCI `german.data`): 1,000 rows, 20 attributes, class 1 = good / 2 = bad.

The sensitive attribute `sex` is derived from attribute 9 (personal status and sex): A92 and A95 are female,
A91, A93 and A94 male.
"""

from __future__ import annotations

from privfair_cli.datasets import read_csv_strict

COLUMNS = [
    "status", "duration", "credit_history", "purpose", "credit_amount", "savings", "employment",
    "installment_rate", "personal_status", "other_debtors", "residence_since", "property", "age",
    "other_installment", "housing", "existing_credits", "job", "people_liable", "telephone", "foreign_worker",
    "credit",
]


def read(paths, card):
    df = read_csv_strict(paths[0], expected_cols=len(COLUMNS), sep=" ", header=None, names=COLUMNS, dtype=str)
    df["sex"] = df["personal_status"].map({"A92": "female", "A95": "female"}).fillna("male")
    return df
