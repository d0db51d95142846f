"""UCI Census-Income (KDD) 1994-95: `census-income.data.gz` + `census-income.test.gz`, 299,285 rows, 42 columns
(prefair.md §8.3). Column names as in the PreFair reference data; `unknown` is the instance weight.

Numeric columns are written as zero-padded strings so that the generic discretiser's sorted levels follow the
numeric order (each distinct value is one code, as the seed prescribes; A12: every column re-indexed 0..k-1).
"""

from __future__ import annotations

import pandas as pd

from privfair_cli.datasets import read_csv_strict
from privfair_cli.errors import DataError

COLUMNS = [
    "age", "class_worker", "det_ind_code", "det_occ_code", "education", "wage_per_hour", "hs_college",
    "marital_stat", "major_ind_code", "major_occ_code", "race", "hisp_origin", "sex", "union_member",
    "unemp_reason", "full_or_part_emp", "capital_gains", "capital_losses", "stock_dividends", "tax_filer_stat",
    "region_prev_res", "state_prev_res", "det_hh_fam_stat", "det_hh_summ", "unknown", "mig_chg_msa",
    "mig_chg_reg", "mig_move_reg", "mig_same", "mig_prev_sunbelt", "num_emp", "fam_under_18", "country_father",
    "country_mother", "country_self", "citizenship", "own_or_self", "vet_question", "vet_benefits",
    "weeks_worked", "year", "income_50k",
]
INTEGER = ["age", "det_ind_code", "det_occ_code", "wage_per_hour", "capital_gains", "capital_losses",
           "stock_dividends", "num_emp", "own_or_self", "vet_benefits", "weeks_worked", "year"]


def read(paths, card) -> pd.DataFrame:
    frames = [read_csv_strict(p, expected_cols=len(COLUMNS), header=None, names=COLUMNS, skipinitialspace=True,
                              dtype=str, keep_default_na=False, compression="gzip") for p in paths]
    df = pd.concat(frames, ignore_index=True)
    for col in INTEGER:
        df[col] = df[col].astype(int).map("{:010d}".format)
    df["unknown"] = df["unknown"].astype(float).map("{:012.2f}".format)
    expected = card.get("rows")
    if expected and len(df) != expected:
        raise DataError(f"kdd: {len(df)} rows, the card expects {expected}")
    return df
