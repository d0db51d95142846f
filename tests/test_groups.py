"""Groups beyond two and the uncertainty of every gap (docs/groups.md): k-group rates and gaps equal fairlearn's
MetricFrame on the same predictions, the bootstrap intervals cover a known rate about 95 % of the time, the loader
carries every group and the reference, the schema refuses what makes no sense, and a run on Adult's five races
reports, saves and plots them."""

import json

import numpy as np
import pandas as pd
import pytest

from privfair_cli import datasets as data_lib
from privfair_cli import evaluate, metrics, schema
from privfair_cli.datasets import tabular
from privfair_cli.errors import ConfigError, DataError
from tests.conftest import card, needs_data

FAIRLEARN_RATES = ("positive_rate", "tpr", "fpr", "fdr", "accuracy")


def fake(seed: int, n: int = 3000, sizes=(0.6, 0.2, 0.1, 0.07, 0.03)):
    """Labels, predictions whose rates depend on the group, and the groups' codes."""
    rng = np.random.default_rng(seed)
    g = rng.choice(len(sizes), n, p=sizes)
    y = (rng.random(n) < 0.2 + 0.1 * (g % 3)).astype(int)
    yhat = np.where(rng.random(n) < 0.8, y, 1 - y) * (rng.random(n) < 0.9 - 0.1 * g)
    return y, yhat.astype(int), g


def fairlearn_frame(y, yhat, features):
    fl = pytest.importorskip("fairlearn.metrics")
    from sklearn.metrics import accuracy_score, precision_score

    def fdr(a, b):
        return 1 - precision_score(a, b, zero_division=np.nan)

    funcs = {"positive_rate": fl.selection_rate, "tpr": fl.true_positive_rate, "fpr": fl.false_positive_rate,
             "fdr": fdr, "accuracy": accuracy_score}
    return fl.MetricFrame(metrics=funcs, y_true=y, y_pred=yhat, sensitive_features=features)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k_group_rates_and_gaps_equal_fairlearn(seed):
    y, yhat, g = fake(seed)
    names = ["White", "Black", "Asian", "Other", "Native"]
    groups = metrics.Groups("race", tuple(f"race={v}" for v in names), g, 0)
    ours = metrics.group_metrics(y, yhat, groups, g == 0, resamples=0)
    frame = fairlearn_frame(y, yhat, pd.Series(np.asarray(names)[g], name="race"))
    by = frame.by_group
    for v in names:
        assert ours[f"n_test[race={v}]"] == (np.asarray(names)[g] == v).sum()
        for rate in FAIRLEARN_RATES:
            assert ours[f"{rate}[race={v}]"] == pytest.approx(by.loc[v, rate], abs=1e-12)
            if v != "White":
                assert ours[f"{rate}_vs_ref[race={v}]"] == pytest.approx(by.loc[v, rate] - by.loc["White", rate],
                                                                         abs=1e-12)
    for rate, gap in frame.difference(method="between_groups").items():
        assert ours[f"{rate}_gap[race]"] == pytest.approx(gap, abs=1e-12)
    assert ours["reference[race=White]"] == 1 and not any(k.startswith("accuracy_ci") for k in ours)


def test_intersection_groups_equal_fairlearn_with_two_sensitive_features():
    y, yhat, g = fake(3, sizes=(0.3, 0.3, 0.2, 0.1, 0.1))
    rng = np.random.default_rng(4)
    sex = rng.choice(["Female", "Male"], len(y), p=[0.4, 0.6])
    race = np.asarray(["White", "Black", "Asian", "Other", "Native"])[g]
    codes = sorted(set(zip(sex, race, strict=True)))
    labels = [f"sex={a}&race={b}" for a, b in codes]
    code = np.asarray([codes.index(pair) for pair in zip(sex, race, strict=True)])
    ours = metrics.group_metrics(y, yhat, metrics.Groups("sex&race", tuple(labels), code, 0), None, resamples=0)
    frame = fairlearn_frame(y, yhat, pd.DataFrame({"sex": sex, "race": race}))
    for (a, b), row in frame.by_group.iterrows():
        for rate in FAIRLEARN_RATES:
            assert ours[f"{rate}[sex={a}&race={b}]"] == pytest.approx(row[rate], abs=1e-12)
    for rate, gap in frame.difference(method="between_groups").items():
        assert ours[f"{rate}_gap[sex&race]"] == pytest.approx(gap, abs=1e-12)


def test_binary_intervals_surround_the_binary_metrics_and_leave_them_alone():
    y, yhat, g = fake(5)
    s = (g == 0).astype(int)
    binary = metrics.classification(y, yhat, s)
    groups = metrics.Groups("race", tuple(f"race={i}" for i in range(5)), g, 0)
    ours = metrics.group_metrics(y, yhat, groups, s)
    assert not set(ours) & set(binary)  # adds, never replaces
    for name in ("accuracy", "risk_difference", "risk_difference_abs", "dtpr", "dfpr", "dfdr", "equalized_odds_gap",
                 "accuracy_s0", "accuracy_s1"):
        low, high = (ours[n] for n in metrics.ci_names(name))
        assert low < binary[name] < high, name
    for name in ("accuracy[race=3]", "tpr[race=3]", "tpr_gap[race]", "fdr_vs_ref[race=4]"):
        low, high = (ours[n] for n in metrics.ci_names(name))
        assert low <= ours[name] <= high, name
    again = metrics.group_metrics(y, yhat, groups, s)
    assert again == ours  # seeded: the same rows give the same intervals


def test_a_group_without_rows_or_positives_is_nan_not_zero():
    y = np.array([1, 0, 1, 0, 0, 0])
    yhat = np.array([1, 0, 0, 1, 0, 1])
    groups = metrics.Groups("g", ("g=a", "g=b", "g=c"), np.array([0, 0, 0, 1, 1, 1]), 0)
    out = metrics.group_metrics(y, yhat, groups, None, resamples=200)
    assert out["n_test[g=c]"] == 0 and np.isnan(out["accuracy[g=c]"]) and np.isnan(out["tpr[g=b]"])
    assert out["tpr_gap[g]"] != out["tpr_gap[g]"]  # one group with a TPR: no gap
    assert out["accuracy_gap[g]"] == pytest.approx(abs(2 / 3 - 1 / 3))
    assert np.isnan(out["accuracy_ci_low[g=c]"])


def test_interval_coverage_of_a_known_binomial_rate_is_about_95_percent():
    """A known rate: n rows whose prediction is right with probability p; the accuracy's interval must hold p in
    about 95 % of the simulated test sets (percentile bootstrap, BOOTSTRAP_RESAMPLES resamples); and a known gap
    between two groups likewise."""
    rng = np.random.default_rng(7)
    sims, n, p = 600, 400, 0.7
    hits = gap_hits = 0
    for _ in range(sims):
        y = np.ones(n, int)
        s = (rng.random(n) < 0.5).astype(int)
        yhat = (rng.random(n) < np.where(s == 1, p, p - 0.1)).astype(int)
        out = metrics.group_metrics(y, yhat, None, s, seed=int(rng.integers(2**31)))
        truth = 0.5 * p + 0.5 * (p - 0.1)
        hits += out["accuracy_ci_low"] <= truth <= out["accuracy_ci_high"]
        gap_hits += out["risk_difference_ci_low"] <= 0.1 <= out["risk_difference_ci_high"]
    # 600 simulations: the standard error of a 95 % coverage is 0.009
    assert 0.92 <= hits / sims <= 0.975 and 0.92 <= gap_hits / sims <= 0.975, (hits / sims, gap_hits / sims)


def test_percentiles_match_numpy_quantiles_with_undefined_resamples():
    rng = np.random.default_rng(0)
    x = rng.random((1000, 4))
    x[:300, 1] = np.nan
    x[:600, 2] = np.nan  # undefined in more than half: no interval
    low, high = metrics._percentiles(x, 0.95)
    want = np.nanquantile(x, [0.025, 0.975], axis=0)
    np.testing.assert_allclose(low[[0, 1, 3]], want[0, [0, 1, 3]])
    np.testing.assert_allclose(high[[0, 1, 3]], want[1, [0, 1, 3]])
    assert np.isnan(low[2]) and np.isnan(high[2])


# ------------------------------------------------------------------------------------------ loader and schema
TOY = """colour,race,sex,income
red,b,f,high
blue,a,m,low
red,a,m,low
green,c,f,high
red,a,f,low
blue,b,m,high
red,a,m,high
"""


def toy_card(tmp_path, **extra) -> dict:
    (tmp_path / "toy").mkdir(exist_ok=True)
    (tmp_path / "toy" / "toy.csv").write_text(TOY)
    return {"name": "toy", "subdir": "toy", "files": {"toy.csv": {}}, "label": "income", "positive": ["high"],
            "sensitive": "race", "privileged": None, "features": {"onehot": ["colour"]},
            "discrete": {"colour": {}, "race": {}, "sex": {}, "income": {}}, "roles": {"protected": ["race", "sex"]}
            } | extra


@pytest.mark.parametrize("extra,labels,reference,s", [
    ({}, ["race=a", "race=b", "race=c"], 0, [0, 1, 1, 0, 1, 0, 1]),  # the largest group, a
    ({"privileged": "b"}, ["race=a", "race=b", "race=c"], 1, [1, 0, 0, 0, 0, 1, 0]),
    ({"levels": {"race": ["c", "b", "a"]}}, ["race=c", "race=b", "race=a"], 2, [0, 1, 1, 0, 1, 0, 1]),
    ({"sensitive": ["sex", "race"], "privileged": "f"},  # the largest group holding sex=f (ties: the first)
     ["sex=f&race=a", "sex=f&race=b", "sex=f&race=c", "sex=m&race=a", "sex=m&race=b"], 0, [0, 0, 0, 0, 1, 0, 0]),
    ({"sensitive": "sex&race", "privileged": "m&b"},
     ["sex=f&race=a", "sex=f&race=b", "sex=f&race=c", "sex=m&race=a", "sex=m&race=b"], 4, [0, 0, 0, 0, 0, 1, 0]),
])
def test_the_loader_carries_every_group_and_codes_s_as_the_reference(tmp_path, monkeypatch, extra, labels,
                                                                     reference, s):
    monkeypatch.setenv("PRIVFAIR_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path / "cache"))
    c = schema.validate_card(toy_card(tmp_path, **extra))
    t = data_lib.load(c.raw)
    assert t.meta["group_labels"] == labels and t.meta["group_reference"] == reference
    assert t.s.tolist() == s[:len(t)] and (t.s == (t.meta["row_group"] == reference)).all()
    assert t.meta["attribute_columns"][:len(tabular.sensitive_columns(c.raw))] == tabular.sensitive_columns(c.raw)
    sub = t.subset([5, 0])
    assert sub.meta["row_group"].tolist() == t.meta["row_group"][[5, 0]].tolist()


def test_a_privileged_value_no_row_holds_is_refused_with_the_way_out(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVFAIR_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(DataError, match=r"data.privileged='z' matches no row of race \(its values: a, b, c\): name "
                                        r"one of them, or data.privileged=null for the largest group"):
        data_lib.load(schema.validate_card(toy_card(tmp_path, privileged="z")).raw)


def test_the_schema_reads_what_data_sensitive_means():
    """`data.sensitive=race` on Adult: the card's privileged Male is a documented value of sex, so the reference
    is race's largest group and the run says so; an intersection is one column; a value of nothing is refused."""
    race = schema.validate_card(card("adult", sensitive="race"))
    assert race.sensitive == "race" and race.raw["privileged"] is None
    assert "data.privileged='Male' is a value of sex, not of race" in race.notes[0]
    both = schema.validate_card(card("adult", sensitive=["sex", "race"]))
    assert both.sensitive == "sex&race" and both.raw["privileged"] == "Male" and not both.notes
    assert schema.validate_card(card("adult", sensitive="race", privileged="Black")).raw["privileged"] == "Black"
    with pytest.raises(ConfigError, match="data.privileged='Martian' is not a value of race; allowed: White, "):
        schema.validate_card(card("adult", sensitive="race", privileged="Martian"))
    with pytest.raises(ConfigError, match=r"data.sensitive=\['sex', 3\] must name a column"):
        schema.validate_card(card("adult", sensitive=["sex", 3]))
    assert "sensitive" in schema.declared_views(card("adult", privileged=None))


def test_groups_of_a_table_without_carried_groups_are_the_two_values_of_s():
    t = data_lib.Table("x", np.zeros((3, 1)), np.array([1, 0, 1]), np.array([1, 1, 0]), ["f"])
    groups = evaluate.groups_of(t)
    assert groups.labels == ("s=0", "s=1") and groups.reference == 1 and groups.codes.tolist() == [1, 1, 0]
    assert evaluate.groups_of(data_lib.Table("x", np.zeros((3, 1)), np.ones(3), None, ["f"])) is None


# ------------------------------------------------------------------------------------------ a run on five races
@needs_data("adult")
def test_a_run_on_adults_five_races_reports_saves_and_agrees_with_fairlearn(tmp_path, monkeypatch):
    fl = pytest.importorskip("fairlearn.metrics")
    from privfair_cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", "algo=pflr", "data=adult", "data.sensitive=race", "hydra.run.dir=out"]) == 0
    rec = json.loads((tmp_path / "out" / "metrics.json").read_text())
    m = rec["metrics"]
    races = ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"]
    assert [k for k in m if k.startswith("n_test[")] == [f"n_test[race={r}]" for r in races]
    assert m["reference[race=White]"] == 1 and any("not of race" in w for w in rec["warnings"])
    for name in ("accuracy", "risk_difference", "tpr_gap[race]", "tpr_vs_ref[race=Black]", "accuracy[race=Other]"):
        low, high = (m[n] for n in metrics.ci_names(name))
        assert low <= m[name] <= high
    pred = evaluate.read_predictions(tmp_path / "out")
    assert list(pred.columns) == ["row_id", "label", "group", "score", "prediction", "race", "sex", "native-country"]
    assert ((pred.race == "White") == (pred.group == 1)).all()
    frame = fl.MetricFrame(metrics={"tpr": fl.true_positive_rate, "positive_rate": fl.selection_rate},
                           y_true=pred.label, y_pred=pred.prediction, sensitive_features=pred.race)
    for r in races:
        assert m[f"tpr[race={r}]"] == pytest.approx(frame.by_group.loc[r, "tpr"])
    assert m["positive_rate_gap[race]"] == pytest.approx(frame.difference()["positive_rate"])


@needs_data("compas")
def test_a_card_with_its_own_reader_carries_every_group_of_another_attribute():
    """COMPAS's loader reads its own files; the group-aware encoding still applies: data.sensitive=Race gives its
    six coded races (the card's privileged Female is Sex's, so the reference is the largest race)."""
    from privfair_cli.config import load_card

    table = data_lib.load(load_card("compas") | {"sensitive": "Race", "privileged": None})
    groups = evaluate.groups_of(table)
    assert groups.attribute == "Race" and len(groups.labels) == 6
    sizes = np.bincount(groups.codes, minlength=6)
    assert groups.reference == int(np.argmax(sizes)) and (table.s == (groups.codes == groups.reference)).all()


# ------------------------------------------------------------------------------------------ report and plot
def write_runs(root, eps_values=(1.0, 10.0), seeds=(0, 1, 2)):
    """Runs of one algorithm on fake five-group predictions, whose group gaps shrink as eps grows."""
    from privfair_cli import results

    labels = tuple(f"race={v}" for v in ("White", "Black", "Asian", "Other", "Native"))
    for eps in eps_values:
        for seed in seeds:
            y, yhat, g = fake(seed + int(eps), n=2000)
            m = metrics.classification(y, yhat, g == 0) | metrics.group_metrics(
                y, yhat, metrics.Groups("race", labels, g, 0), (g == 0).astype(int))
            rec = {"algo": "pflr", "data": "adult", "eps": eps, "delta": 0.0, "seed": seed, "metrics": m,
                   "privacy": {"eps_spent": eps, "delta_spent": 0.0, "ledger": []}, "guarantee": "eps-DP",
                   "warnings": [], "timings": {"total": 0.1}, "env": {"device": "cpu"}}
            results.write_run(root / f"eps={eps}" / f"seed={seed}", "algo: pflr\n", rec)
    return labels


def test_report_shows_both_spreads_marks_gaps_near_zero_and_plots_every_group(tmp_path, capsys):
    from privfair_cli.tools import report

    labels = write_runs(tmp_path)
    summary = report.report(tmp_path, plot="eps", by_group=True)
    out = capsys.readouterr().out
    assert {"accuracy_ci_low_mean", "dtpr_ci_high_mean", "tpr_gap_ci_low[race]_mean"} <= set(summary.columns)
    assert "tpr_gap[race]" in (tmp_path / "summary.md").read_text()  # more than two groups: the k-group gaps
    row = summary.iloc[0]
    cell = report.cells(summary, "accuracy")[0]
    assert cell == (f"{row['accuracy_mean']:.4f} ± {row['accuracy_std']:.4f} "
                    f"[{row['accuracy_ci_low_mean']:.4f}, {row['accuracy_ci_high_mean']:.4f}]")
    for i in range(len(summary)):
        r = summary.iloc[i]
        near_zero = r["dfpr_ci_low_mean"] <= 0 <= r["dfpr_ci_high_mean"]
        assert report.cells(summary, "dfpr")[i].endswith(report.MARK) == near_zero
    groups = pd.read_csv(tmp_path / "summary_groups.csv")
    assert len(groups) == 2 * len(labels) and set(groups["group"]) == set(labels)
    assert (groups.loc[groups["group"] == "race=White", "reference"] == "yes").all()
    assert groups["n_test_mean"].notna().all() and groups["tpr_ci_low_mean"].notna().all()
    marks = (groups["tpr_vs_ref_ci_low_mean"] <= 0) & (groups["tpr_vs_ref_ci_high_mean"] >= 0)
    assert (tmp_path / "summary_groups.md").read_text().count(report.MARK) >= marks.sum()
    assert (tmp_path / "tradeoff_eps_by_group.png").stat().st_size > 10_000
    assert "wrote" in out and "summary_groups.csv" in out


def test_marks_read_the_signed_gaps():
    from privfair_cli.tools import report

    row = pd.Series({"dtpr_ci_low_mean": -0.01, "dtpr_ci_high_mean": 0.03, "dfpr_ci_low_mean": 0.01,
                     "dfpr_ci_high_mean": 0.05, "tpr_vs_ref_ci_low[race=Black]_mean": -0.2,
                     "tpr_vs_ref_ci_high[race=Black]_mean": 0.1})
    assert report.marked(row, "dtpr") and report.marked(row, "dtpr_abs") and not report.marked(row, "dfpr")
    assert not report.marked(row, "equalized_odds_gap")  # dfpr's interval holds no 0
    assert report.marked(row, "tpr_vs_ref[race=Black]") and not report.marked(row, "tpr_gap[race]")
