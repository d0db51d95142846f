"""Early stopping of DP-SGD (early_stopping.md): the four rules on hand-made histories, the online property, AFP
against the published table, eps at the stop epoch against the accountant, the fairness gaps against fairlearn."""

from __future__ import annotations

import math
from pathlib import Path

import fairlearn.metrics as flm
import numpy as np
import pandas as pd
import pytest
import torch
from torch.nn.utils import vector_to_parameters

from privfair_cli import evaluate
from privfair_cli.algorithms import early_stopping as es
from privfair_cli.algorithms.dpsgd_trainer import labels, predict_scores
from privfair_cli.errors import ConfigError
from privfair_cli.privacy import dpsgd as accounting
from tests.conftest import fit
from tests.test_dpsgd import toy_table

ROOT = Path(__file__).resolve().parents[1]
DELTA = 1e-5


def test_paper_profile_is_the_thesis_bank_and_imdb_settings():
    """dpsgd_es's `auto`: `paper` the thesis' Bank logistic regression (lr 0.02, T 40, C 0.3, L2 0.01) and IMDB
    fasttext column (lr 0.6, T 100, C 1, L2 0); `default` the family's user defaults."""
    from privfair_cli import registry

    keys = ("C", "lr", "epochs", "l2")
    paper = registry.make("dpsgd_es", profile="paper").cfg
    assert [paper.spec(k, "logistic") for k in keys] == [0.3, 0.02, 40, 0.01]
    assert [paper.spec(k, "fasttext") for k in keys] == [1.0, 0.6, 100, 0.0]
    user = registry.make("dpsgd_es").cfg
    assert [user.spec(k, "logistic") for k in keys] == [registry.make("dpsgd").cfg.spec(k, "logistic") for k in keys]


def P(n, last, **kw):
    return es.RuleParams(n, last, **kw)


# ----------------------------------------------------------------------------------------- rules by hand
def test_sc1_stops_at_the_first_fa_above_beta1():
    """Epochs 3..8; A_min over [3, t] is 0.6, so FA(6) = 0.62/0.6 - 1 = 0.033 < 0.1 and FA(7) = 0.7/0.6 - 1 =
    0.167 >= 0.1 (constant gap: the alpha term is 0)."""
    acc = np.array([0.5, 0.5, 0.6, 0.6, 0.6, 0.62, 0.7, 0.7])
    gap = np.full(8, 0.2)
    assert es.sc1(acc, gap, P(3, 8, beta1=0.1)) == 7
    assert es.sc1(acc, gap, P(3, 8, beta1=0.2)) == 8          # never satisfied: n + k
    assert es.sc1(acc, gap, P(3, 8, beta1=0.03)) == 6


def test_sc1_discrimination_term_is_max_gap_over_current_gap():
    """Constant accuracy: FA(t) = alpha (G_max(t) / G(t) - 1); the gap halves at epoch 5, FA(5) = alpha."""
    acc = np.full(6, 0.8)
    gap = np.array([0.3, 0.3, 0.2, 0.2, 0.1, 0.1])
    assert es.sc1(acc, gap, P(3, 6, alpha=1.0, beta1=0.9)) == 5
    assert es.sc1(acc, gap, P(3, 6, alpha=1.0, beta1=1.1)) == 6
    assert es.fa_score(acc, gap, P(3, 6, alpha=0.001), 5) == pytest.approx(0.001 * (0.2 / (0.1 + es.GAP_GUARD) - 1))


def test_sc1_lookahead_reads_the_whole_window():
    """Eqs. 6.10 / 6.12 as printed: A_min over [n, n + k] sees the later dip, so FA(n) is already 0.4."""
    acc = np.array([0.7, 0.7, 0.7, 0.5])
    gap = np.full(4, 0.1)
    assert es.sc1(acc, gap, P(1, 4, beta1=0.1)) == 4
    assert es.sc1(acc, gap, P(1, 4, beta1=0.1, window="lookahead")) == 1


def test_sc2_stops_after_beta2_non_increasing_gaps():
    gap = np.array([0.5, 0.4, 0.45, 0.44, 0.43, 0.42, 0.5, 0.3])
    acc = np.zeros(8)
    assert es.sc2(acc, gap, P(2, 8, beta2=3)) == 6           # epochs 3..6: 0.45 >= 0.44 >= 0.43 >= 0.42
    assert es.sc2(acc, gap, P(2, 8, beta2=5)) == 8           # never: n + k
    assert es.sc2(acc, np.full(8, 0.2), P(2, 8, beta2=3)) == 5  # ties count as non-increasing


def test_baselines():
    acc = np.array([0.9, 0.5, 0.7, 0.8, 0.8, 0.6])
    gap = np.zeros(6)
    assert es.best_val_acc(acc, gap, P(2, 6)) == 4            # first maximum in the window, not epoch 1
    assert es.fixed_epoch(acc, gap, P(2, 5)) == 5
    assert set(es.STOPPING_RULES) == {"es_sc1", "es_sc2", "es_best_val_acc", "es_fixed_epoch"}


@pytest.mark.parametrize("rule", sorted(es.STOPPING_RULES))
def test_rules_never_read_past_what_they_may(rule):
    """Online rules: replacing every epoch after the returned one by junk leaves the answer unchanged.
    Baseline 1 (declared not online) reads no epoch after the window's end."""
    rng = np.random.default_rng(0)
    f = es.STOPPING_RULES[rule]
    for _ in range(300):
        E = int(rng.integers(5, 30))
        n = int(rng.integers(1, E))
        last = int(rng.integers(n, E + 1))
        p = P(n, last, alpha=float(rng.choice([0.001, 1.0])), beta1=float(rng.choice([0.01, 0.05, 0.3])),
              beta2=int(rng.integers(1, 4)))
        acc, gap = rng.uniform(0.5, 0.9, E), rng.uniform(0.0, 0.3, E)
        t = f(acc, gap, p)
        assert n <= t <= last
        cut = t if es.ONLINE[rule] else last
        acc2, gap2 = acc.copy(), gap.copy()
        acc2[cut:], gap2[cut:] = rng.uniform(0.5, 0.9, E - cut), rng.uniform(0.0, 0.3, E - cut)
        assert f(acc2, gap2, p) == t
    assert es.ONLINE[rule] == (rule != "es_best_val_acc")


def test_window_auto_is_70_30_at_100_epochs_and_refuses_a_window_past_the_end():
    assert es.window_of(100, "auto", "auto") == (70, 100)
    assert es.window_of(40, "auto", "auto") == (28, 40)
    assert es.window_of(100, 70, 30) == (70, 100)
    with pytest.raises(ConfigError, match="past the run's 40 epochs"):
        es.window_of(40, 30, 20)


# ----------------------------------------------------------------------------------------- AFP
def test_afp_recomputes_the_published_tables():
    """Eq. 6.25 from each published row's accuracy, discrimination and epoch gives its printed AFP to 5e-4, except
    the rows whose CSV note flags the printed AFP as inconsistent."""
    pub = pd.read_csv(ROOT / "results" / "published" / "early_stopping.csv")
    pub = pub[pub["table"].isin(["Table 6.1", "Table 6.2"])].fillna({"notes": ""})
    keys = ["table", "algorithm", "setting"]
    wide = pub.pivot_table(index=keys, columns="metric", values="mean", aggfunc="first")
    flagged = pub[(pub["metric"] == "afp") & (pub["notes"] != "")].set_index(keys).index
    checked = 0
    for idx, r in wide.iterrows():
        if idx in flagged:
            continue
        assert es.afp(r["accuracy"], r["discrimination"], r["stop_epoch"]) == pytest.approx(r["afp"], abs=5e-4)
        checked += 1
    assert checked >= 55  # of 72 rows; the rest carry a note


# ----------------------------------------------------------------------------------------- the plugin
@pytest.fixture(scope="module")
def run():
    data, test = toy_table(), toy_table(500, seed=9)
    plugin, ledger = fit("dpsgd_es", data, eps=100, delta=DELTA, seed=1, epochs=8, lr=0.5, C=1.0,
                         n_start=3, window=5, beta1=0.01, beta1_sweep=[0.01, 0.5])
    metrics = evaluate.metrics_for(plugin, data, test, np.random.default_rng(0))
    return plugin, ledger, metrics, test


def test_eps_at_the_stop_epoch_is_the_accountant_at_that_step_count(run):
    plugin, ledger, m, _ = run
    q, sigma = plugin.plan.q, plugin.plan.sigma
    steps = plugin.history.epoch_steps
    assert plugin.history.eps[-1] == pytest.approx(ledger.spent()[0], rel=1e-12)
    seen = set()
    for r in plugin.stop_rows:
        t = r["stop_epoch"]
        assert r["eps"] == pytest.approx(accounting.dpsgd_epsilon(q, sigma, int(steps[t - 1]), DELTA,
                                                                  accounting=plugin.cfg.accounting), rel=1e-9)
        rule, fairness = r["rule"], r["fairness"]
        assert m[f"{rule}_eps_{fairness}"] == r["eps"] and m[f"{rule}_stop_epoch_{fairness}"] == t
        assert m[f"{rule}_afp_{fairness}"] == pytest.approx(-0.1 * r["accuracy"] + r["discrimination"] + 0.01 * t)
        seen.add(r["rule"])
    assert seen == set(es.STOPPING_RULES) | {"es_sc1_b0.01", "es_sc1_b0.5"}
    assert m["es_fixed_epoch_stop_epoch_equal_odds"] == 8


def test_stop_metrics_are_those_of_that_epochs_weights(run):
    """Test accuracy and gaps at the stop epoch, recomputed from the logged weights of that epoch with fairlearn
    (an independent implementation of the gaps)."""
    plugin, _, m, test = run
    X = plugin._inputs(test.X)
    probe = plugin.model
    saved = torch.nn.utils.parameters_to_vector(probe.parameters()).detach().clone()
    try:
        for r in plugin.stop_rows:
            vector_to_parameters(torch.as_tensor(plugin.log.weights[r["stop_epoch"] - 1]), probe.parameters())
            yhat = labels("logistic", predict_scores(probe, X))
            assert r["accuracy"] == pytest.approx(np.mean(yhat == test.y))
            if r["fairness"] == "demographic_parity":
                want = flm.demographic_parity_difference(test.y, yhat, sensitive_features=test.s)
            else:
                frame = flm.MetricFrame(metrics={"tpr": flm.true_positive_rate, "fpr": flm.false_positive_rate},
                                        y_true=test.y, y_pred=yhat, sensitive_features=test.s)
                d = frame.difference()
                want = d["tpr"] if r["fairness"] == "equal_opportunity" else (d["tpr"] + d["fpr"]) / 2
            assert r["discrimination"] == pytest.approx(want, abs=1e-12)
    finally:
        vector_to_parameters(saved, probe.parameters())


def test_eodds_aggregation_options():
    data, test = toy_table(), toy_table(500, seed=9)
    h = {}
    for agg in ("mean", "max", "sum"):
        p, _ = fit("dpsgd_es", data, eps=100, delta=DELTA, seed=1, epochs=3, lr=0.5, C=1.0, eodds_agg=agg)
        evaluate.metrics_for(p, data, test, np.random.default_rng(0))
        h[agg] = p.history.sets["test"]
    a, b = h["mean"]["dtpr_abs"], h["mean"]["dfpr_abs"]
    assert h["mean"]["eodds_gap"] == pytest.approx((a + b) / 2)
    assert h["max"]["eodds_gap"] == pytest.approx(np.maximum(a, b))
    assert h["sum"]["eodds_gap"] == pytest.approx(a + b)
    assert h["mean"]["eopp_gap"] == pytest.approx(a) and h["mean"]["dp_gap"] == pytest.approx(
        h["mean"]["risk_difference_abs"])


@pytest.mark.parametrize("overrides, fragment", [
    ({"validation_size": 0.0}, "algo.validation_size=0"),
    ({"history": False}, "algo.history=false"),
    ({"n_start": 5, "window": 10, "epochs": 6}, "past the run's 6 epochs"),
])
def test_refusals(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment):
        fit("dpsgd_es", toy_table(), eps=100, delta=DELTA, **({"epochs": 3} | overrides))


def test_published_fairness_names_are_ours():
    pub = pd.read_csv(ROOT / "results" / "published" / "early_stopping.csv")
    names = {s.split("fairness=")[1].split(";")[0] for s in pub["setting"].dropna() if "fairness=" in s}
    assert names == set(es.FAIRNESS)
    assert not math.isnan(es.afp(0.8, 0.1, 90))


@pytest.mark.parametrize("n, b, sigma, epochs, spec_eps", [
    (18000, 256, 1.0, [40], [5.65]), (12000, 256, 1.0, [40], [7.14]),          # Bank, Health
    (12000, 128, 1.0, [70, 80, 90, 100], [6.40, 6.90, 7.34, 7.73]),           # UTK Face
    (12000, 128, 1.5, [70, 80, 90, 100], [3.39, 3.64, 3.87, 4.08]),
    (12000, 128, 2.0, [70, 80, 90, 100], [2.35, 2.52, 2.68, 2.83]),
])
def test_accountant_gives_the_spec_reference_eps(n, b, sigma, epochs, spec_eps):
    """early_stopping.md §1.4's reference table (RDP orders 2-256, classic conversion, q = b / N_train, delta
    1e-5): eps after T = epochs * N / b steps, to the printed two decimals."""
    got = accounting.epsilon_after(b / n, sigma, None, np.array([e * n // b for e in epochs]), DELTA)
    assert got == pytest.approx(spec_eps, abs=0.006)
