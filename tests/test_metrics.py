"""Metrics against hand-computed cases and against fairlearn on random predictions."""

import numpy as np
import pandas as pd
import pytest

from privfair_cli import metrics


def test_classification_hand_case():
    #            s=1: 4 rows          s=0: 4 rows
    y = np.array([1, 1, 0, 0, 1, 1, 0, 0])
    yhat = np.array([1, 0, 1, 1, 1, 0, 0, 0])
    s = np.array([1, 1, 1, 1, 0, 0, 0, 0])
    m = metrics.classification(y, yhat, s)
    assert m["accuracy"] == pytest.approx(4 / 8)
    assert m["risk_difference"] == pytest.approx(3 / 4 - 1 / 4)
    assert m["dtpr"] == pytest.approx(1 / 2 - 1 / 2)
    assert m["dfpr"] == pytest.approx(2 / 2 - 0 / 2)
    assert m["fdr_s1"] == pytest.approx(2 / 3)
    assert m["fdr_s0"] == pytest.approx(0.0)
    assert m["equalized_odds_gap"] == pytest.approx(1.0)
    assert m["balanced_error_rate"] == pytest.approx(1 - (2 / 4 + 2 / 4) / 2)
    assert m["accuracy_s1"] == pytest.approx(1 / 4) and m["accuracy_s0"] == pytest.approx(3 / 4)


def test_empty_group_rate_is_nan():
    m = metrics.classification([1, 1, 0], [1, 0, 0], [1, 1, 1])
    assert np.isnan(m["risk_difference"])


@pytest.mark.parametrize("seed", range(5))
def test_against_fairlearn(seed):
    fl = pytest.importorskip("fairlearn.metrics")
    rng = np.random.default_rng(seed)
    n = 500
    y, yhat, s = rng.integers(0, 2, n), rng.integers(0, 2, n), rng.integers(0, 2, n)
    m = metrics.classification(y, yhat, s)
    assert m["risk_difference_abs"] == pytest.approx(fl.demographic_parity_difference(y, yhat, sensitive_features=s))
    assert m["equalized_odds_gap"] == pytest.approx(fl.equalized_odds_difference(y, yhat, sensitive_features=s))
    frame = fl.MetricFrame(metrics={"tpr": fl.true_positive_rate, "fpr": fl.false_positive_rate,
                                    "sel": fl.selection_rate}, y_true=y, y_pred=yhat, sensitive_features=s)
    by = frame.by_group
    assert m["dtpr"] == pytest.approx(by.loc[1, "tpr"] - by.loc[0, "tpr"])
    assert m["dfpr"] == pytest.approx(by.loc[1, "fpr"] - by.loc[0, "fpr"])
    assert m["tpr_s0"] == pytest.approx(by.loc[0, "tpr"])


def test_tvd_hand_case():
    domain = {"a": 2, "b": 3}
    real = pd.DataFrame({"a": [0, 0, 1, 1], "b": [0, 1, 2, 2]})
    synth = pd.DataFrame({"a": [0, 0, 0, 1], "b": [0, 0, 2, 2]})
    # a: real (.5,.5) vs synth (.75,.25) -> .25 ; b: real (.25,.25,.5) vs (.5,0,.5) -> .25
    assert metrics.tvd_kway(real, synth, domain, 1) == pytest.approx(0.25)
    # (a,b): real {00:.25,01:.25,12:.5}; synth {00:.5,02:.25,12:.25} -> (.25+.25+.25+.25)/2
    assert metrics.tvd_kway(real, synth, domain, 2) == pytest.approx(0.5)
    assert metrics.marginal(real, ("a", "b"), domain).sum() == pytest.approx(1.0)


def test_contingency_counts_and_weights_every_cell():
    rng = np.random.default_rng(0)
    codes, w = rng.integers(0, [2, 3, 4], size=(200, 3)), rng.random(200)
    want, wsum = np.zeros((2, 3, 4)), np.zeros((2, 3, 4))
    np.add.at(want, tuple(codes.T), 1)
    np.add.at(wsum, tuple(codes.T), w)
    assert np.array_equal(metrics.contingency(codes, (2, 3, 4)), want)
    np.testing.assert_allclose(metrics.contingency(codes, (2, 3, 4), w), wsum, rtol=1e-12)
    assert metrics.contingency(codes, (2, 3, 4), dtype=np.float32).dtype == np.float32
    assert metrics.contingency(codes[:, :0], ()) == 200  # no column: the one-cell total
    assert metrics.group_counts([1, 1, 0, 0, 1], [1, 0, 0, 0, 1]) == {"G_PP": 2, "G_UP": 0, "G_PN": 1, "G_UN": 2}


def test_ber():
    assert metrics.ber([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(0.25)


def test_graph_recovery_hand_case():
    true = np.zeros((4, 4), int)
    true[0, 1] = true[1, 2] = true[2, 3] = 1      # chain 0-1-2-3
    learned = np.zeros((4, 4), int)
    learned[1, 0] = learned[1, 2] = learned[0, 3] = 1  # direction ignored; one false, one missing
    m = metrics.graph_recovery(true, learned)
    assert m["edge_tpr"] == pytest.approx(2 / 3)
    assert m["edge_fpr"] == pytest.approx(1 / 3)
    assert m["edge_tdr"] == pytest.approx(2 / 3)
    assert m["edge_fdr"] == pytest.approx(1 / 3)
    assert m["shd"] == 2
