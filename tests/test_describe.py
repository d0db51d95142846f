"""The `describe` plugin (a dataset's description measured as a run) and the comparisons of the papers' data sizes
built on it: its counts against an independent count of the raw files, its invariants on any card, its run record
as every run's (no noise, no spend), and the verdict of a description cell."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privfair_cli import compose, registry, runner
from privfair_cli.tools import reproduce
from privfair_cli.tools.verdicts import judge, kind_of
from tests.conftest import card, needs_data, table

ROOT = Path(__file__).resolve().parents[1]
ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
                 "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
                 "income"]


def _adult_by_pandas() -> pd.DataFrame:
    """UCI Adult read with pandas alone: both files stacked, `adult.test`'s first line skipped, rows holding a '?'
    dropped (the card's documented filter), labels without `adult.test`'s trailing '.'."""
    folder = Path(os.environ["PRIVFAIR_DATA_DIR"]) / "adult"
    parts = [pd.read_csv(folder / name, header=None, names=ADULT_COLUMNS, skipinitialspace=True, skiprows=skip,
                         na_values=["?"], dtype=str) for name, skip in (("adult.data", 0), ("adult.test", 1))]
    raw = pd.concat(parts, ignore_index=True)
    raw = raw.dropna(how="all")  # a blank trailing line is no row
    raw = raw.dropna()
    raw["income"] = raw["income"].str.rstrip(".")
    return raw


def _describe(data: str, tmp_path: Path, *overrides: str) -> dict:
    cfg = compose.compose(["algo=describe", f"data={data}", *overrides])
    return runner.run(cfg, tmp_path / "run", log=lambda *_: None)


@needs_data("adult")
def test_adult_counts_equal_an_independent_count_of_the_raw_files(tmp_path):
    raw = _adult_by_pandas()
    record = _describe("adult", tmp_path)
    m = record["metrics"]
    assert m["n_rows"] == len(raw)
    adult = card("adult")
    privileged = raw["sex"] == adult["privileged"]
    assert (m["n_rows_s1"], m["n_rows_s0"]) == (privileged.sum(), (~privileged).sum())
    positive = raw["income"].isin(adult["positive"])
    assert (m["n_rows_class1"], m["n_rows_class0"]) == (positive.sum(), (~positive).sum())
    # the run's split: every row once, in train or test
    assert m["n_train"] + m["n_test"] == len(raw)
    assert m["n_train_s0"] + m["n_train_s1"] == m["n_train"] == m["n_train_class0"] + m["n_train_class1"]
    # the classifier view encodes the card's declared attributes (its one-hot columns, one per level)
    features = adult["features"]
    declared = [*features["numeric"], *features["onehot"], *features["binary"]]
    assert m["n_inputs"] == len(declared)
    width = len(features["numeric"]) + len(features["binary"]) + sum(raw[c].nunique() for c in features["onehot"])
    assert m["d"] == width
    # the discrete view: the card's attributes, the label among them
    assert m["n_columns"] == len(adult["discrete"]) and m["n_attributes"] == len(adult["discrete"]) - 1


@needs_data("adult")
def test_a_run_of_describe_spends_nothing_and_claims_nothing(tmp_path):
    record = _describe("adult", tmp_path, "data.n=500")
    assert record["guarantee"] == "none"
    assert record["privacy"]["private"] is False
    assert record["privacy"]["eps_spent"] == 0 and record["privacy"]["ledger"] == []
    assert record["metrics"]["n_rows"] == 500
    assert registry.get("describe").requirements() == ()  # runs on any card: it reads no view


def test_counts_add_up_on_a_card_with_its_own_test_rows():
    """synth_fes fixes its test rows (`row_is_test`): the training counts are the source's training part."""
    from privfair_cli import evaluate

    train, test = table("synth_fes")
    m = evaluate.metrics_for(registry.make("describe"), train, test, np.random.default_rng(0))
    assert m["n_rows"] == len(train) + len(test) and (m["n_train"], m["n_test"]) == (len(train), len(test))
    assert m["n_rows_s0"] + m["n_rows_s1"] == m["n_rows"] == m["n_rows_class0"] + m["n_rows_class1"]
    assert m["n_train_class1"] == np.sum(train.y == 1) and m["n_train_s1"] == np.sum(train.s == 1)
    assert m["n_rows_s1"] == np.sum(train.s == 1) + np.sum(test.s == 1)
    assert not train.meta["row_is_test"].any() and test.meta["row_is_test"].all()


def test_a_table_seen_twice_is_counted_once():
    """data.test_size=0 (and a graph card) give the training rows as the test rows: each row counts once."""
    train, test = table("synth_fes", n=400)
    from privfair_cli.algorithms.describe import counts, description

    plugin = registry.make("describe")
    assert description(plugin, train, train, np.random.default_rng(0))["n_rows"] == len(train)
    assert counts("n_rows", [train], 2)["n_rows"] == len(train)
    assert "n_rows_class0" not in counts("n_rows", [train], 1)  # more label values than max_classes: no per-class


@needs_data("adult")
def test_a_description_cell_is_judged_as_a_count():
    """The published Adult size of Xu's Table 9.5 against the independent count: a `count` (equal or not), and the
    committed comparison of xu2021_table9_sizes holds that count with its verdict."""
    raw = _adult_by_pandas()
    published = pd.read_csv(ROOT / "results" / "published" / "dpsgd_f.csv")
    spec = reproduce.experiment_spec("xu2021_table9_sizes")
    cells = reproduce.published_cells(published, spec)
    adult = cells[(cells["table"] == "Table 9.5") & (cells["dataset"] == "Adult")
                  & cells["setting"].str.contains("variant=original_unbalanced")
                  & cells["setting"].str.endswith("group=total")]
    assert len(adult) == 1
    cell = adult.iloc[0]
    assert kind_of(cell["metric"]).name == "count"
    verdict = judge(cell["metric"], cell["mean"], cell["std"], float(len(raw)), float("nan"), 1)
    assert verdict.verdict == ("match" if cell["mean"] == len(raw) else "deviates")
    assert judge(cell["metric"], cell["mean"], cell["std"], float(len(raw)) + 1, float("nan"), 1).verdict == "deviates"
    committed = pd.read_csv(ROOT / "results" / "reproduce" / "xu2021_table9_sizes" / "comparison.csv")
    row = committed[(committed["table"] == "Table 9.5") & (committed["dataset"] == "Adult")
                    & (committed["setting"] == cell["setting"])]
    assert len(row) == 1
    assert math.isclose(row.iloc[0]["ours_mean"], len(raw)) and row.iloc[0]["verdict"] == verdict.verdict


def test_drop_pairs_the_runs_by_seed():
    """`drop`: reference minus algorithm on the same seed (an unpaired seed is left out)."""
    runs = pd.DataFrame({"algo": ["lr", "lr", "lr", "privlr", "privlr"], "seed": [0, 1, 2, 0, 1],
                         "accuracy": [0.80, 0.82, 0.90, 0.70, 0.78]})
    cell = reproduce.drop(lambda a: runs[runs["algo"] == a], "privlr", "accuracy", reference="lr")
    assert cell.n == 2
    assert math.isclose(cell.mean, np.mean([0.10, 0.04])) and math.isclose(cell.std, np.std([0.10, 0.04], ddof=1))


@pytest.mark.parametrize("name", ["xu2021_table9_sizes", "pujol2023_sizes", "zhang2022_sec5_3_sizes"])
def test_size_experiments_compare_describe_runs(name):
    """The size experiments read `describe` runs: every cell they measure comes from the run record."""
    committed = pd.read_csv(ROOT / "results" / "reproduce" / name / "comparison.csv", dtype=str, keep_default_na=False)
    measured = committed[committed["verdict"] != "not_run"]
    assert len(measured) and (measured["recorded"] == "yes").all()
    record = pd.read_csv(ROOT / "results" / "reproduce" / name / "runs.csv.gz")
    assert set(record["algo"]) == {"describe"}
