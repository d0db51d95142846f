"""UCI Bank marketing (`bank-full.csv`): 45,211 rows, label `y` (term deposit subscribed).

The sensitive attribute is age, binarised as in the fairness-benchmark literature: `age_group` = "over25" when
age > 25 (privileged), else "upto25".
"""

from __future__ import annotations

import numpy as np

from privfair_cli.datasets import read_csv_strict


def read(paths, card):
    df = read_csv_strict(paths[0], expected_cols=17, sep=";", dtype=str)
    df["age_group"] = np.where(df["age"].astype(int) > 25, "over25", "upto25")
    return df
