"""Correlated DP (privacy/correlated.py) and the CR-FS family (algorithms/crfs.py; crfs.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privfair_cli import evaluate, registry
from privfair_cli.config import load_card
from privfair_cli.datasets import load
from privfair_cli.errors import BudgetExceeded, ConfigError
from privfair_cli.privacy import Budget, PrivacyLedger, correlated, laplace
from tests.conftest import require_data


def brute_theta(X):
    n = len(X)
    out = np.eye(n)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            a, b = X[i] - X[i].mean(), X[j] - X[j].mean()
            den = math.sqrt((a @ a) * (b @ b))
            out[i, j] = 0.0 if den == 0 else (a @ b) / den
    return out


def ledger(eps=math.inf):
    return PrivacyLedger(Budget(eps))


def test_theta_matches_a_brute_force_row_correlation_loop():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, size=(25, 4)).astype(float)
    X[3] = 1.0  # a zero-variance row: correlated with itself only
    X[10:14] = X[0]  # copies of one record: kappas forms their row once and weights it by 5
    X[20] = X[3]  # a second zero-variance row, equal to the first but not correlated with it
    theta = correlated.degree_matrix(X)
    assert np.allclose(theta, brute_theta(X), atol=1e-12)
    assert np.all(theta[3, np.arange(25) != 3] == 0) and theta[0, 10] == pytest.approx(1.0)
    for theta0, absolute in ((0.5, False), (0.9, False), (0.5, True), (-1.0, False)):
        t = brute_theta(X)
        keep = (np.abs(t) if absolute else t) >= theta0
        np.fill_diagonal(keep, True)
        cs = np.max(np.sum(np.where(keep, np.abs(t), 0), axis=1))
        gs = np.max(np.sum(keep, axis=1))
        k = correlated.kappas(X, theta0, absolute, block=7)  # blocks of 7 rows: the blocked sums agree
        assert k["kappa_cs"] == pytest.approx(cs) and k["kappa_gs"] == gs
        assert k["kappa_cs"] <= k["kappa_gs"] + 1e-12  # §0.3: correlated <= group sensitivity
        off = ~np.eye(25, dtype=bool)
        assert k["mean_abs_corr"] == pytest.approx(np.abs(t[off]).mean())
        assert np.allclose(correlated.threshold(theta, theta0, absolute), np.where(keep, t, 0), atol=1e-12)


def test_correlated_sensitivity_is_kappa_times_individual_and_recorded():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 3))
    k = correlated.kappas(X, 0.8)["kappa_cs"]
    led = ledger()
    correlated.correlated_laplace(np.zeros(5), 0.25, k, 0.5, rng, led)
    assert led.entries[0].sensitivity == pytest.approx(0.25 * k)
    assert led.entries[0].eps == 0.5
    led = ledger()
    correlated.correlated_output_perturbation(np.zeros(3), 100, 0.1, k, 2.0, rng, led, draws=3)
    assert [e.eps for e in led.entries] == [2.0] * 3
    assert led.entries[0].sensitivity == pytest.approx(k * 2 / (100 * 0.1))
    led = ledger()  # a workload of Q answers calibrated one by one is Q eps by composition
    correlated.correlated_laplace(np.zeros(10), 1.0, k, 0.2, rng, led, answers_composed=10)
    assert led.spent()[0] == pytest.approx(2.0)


def test_correlated_laplace_noise_matches_its_scale():
    rng = np.random.default_rng(2)
    kappa, delta, eps = 3.5, 1.0, 0.2
    noise = correlated.correlated_laplace(np.zeros(20000), delta, kappa, eps, rng, ledger())
    scale = kappa * delta / eps
    assert stats.kstest(noise, stats.laplace(scale=scale).cdf).pvalue > 1e-3
    assert abs(np.mean(np.abs(noise)) / scale - 1) < 0.03  # E|Lap(b)| = b: the expected MAE kappa / eps


def test_output_perturbation_noise_matches_its_scale():
    rng = np.random.default_rng(3)
    n, lam, kappa, eps, d = 500, 0.01, 4.0, 0.5, 6
    draws = correlated.correlated_output_perturbation(np.zeros(d), n, lam, kappa, eps, rng, None, draws=20000)
    scale = 2 * kappa / (n * lam) / eps
    norms = np.linalg.norm(draws, axis=1)
    assert stats.kstest(norms, stats.gamma(d, scale=scale).cdf).pvalue > 1e-3
    unit = draws / norms[:, None]
    assert np.all(np.abs(unit.mean(0)) < 0.03)  # uniform direction
    assert np.allclose(unit.T @ unit / len(unit), np.eye(d) / d, atol=0.01)


def test_theta0_one_reduces_to_the_ordinary_mechanisms():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 5))  # continuous: no two rows perfectly correlated
    k = correlated.kappas(X, 1.0)
    assert k["kappa_cs"] == 1.0 and k["kappa_gs"] == 1.0
    a = correlated.correlated_laplace(np.arange(4.0), 1.0, k["kappa_cs"], 0.7, np.random.default_rng(9), ledger())
    b = laplace(np.arange(4.0), 1.0, 0.7, np.random.default_rng(9), ledger())
    assert np.array_equal(a, b)
    assert correlated.output_sensitivity(300, 0.01, k["kappa_cs"]) == pytest.approx(2 / (300 * 0.01))


def test_budget_past_the_ledger_is_refused_before_noise():
    with pytest.raises(BudgetExceeded):
        correlated.correlated_laplace(np.zeros(3), 1.0, 2.0, 0.6, np.random.default_rng(0), ledger(1.0),
                                      answers_composed=3)


@pytest.fixture(scope="module")
def titanic():
    require_data("titanic")
    table = load(load_card("titanic_crfs"))
    return table


def _fit(name, table, eps=math.inf, **over):
    plugin = registry.make(name, **over)
    led = ledger(eps)
    rng = np.random.default_rng(0)
    plugin.fit(table, Budget(eps), led, rng)
    return plugin, led


def test_titanic_card_and_preparation(titanic):
    assert titanic.X.shape == (891, 7) and titanic.meta["original_columns"] == 12
    assert titanic.meta["row_missing"][:, titanic.feature_names.index("Age")].sum() == 177
    assert 0 <= titanic.X.min() and titanic.X.max() <= 1


def test_step3_is_computed_and_charged_once(titanic, monkeypatch):
    from privfair_cli.algorithms import crfs

    calls = []
    real = crfs.laplace
    monkeypatch.setattr(crfs, "laplace", lambda *a, **k: calls.append(k.get("note")) or real(*a, **k))
    plugin, led = _fit("crfs", titanic.subset(np.arange(300)), eps=math.inf, task="count", noise_draws=3,
                       eps_release=0.5, eps1=1.0, n_estimators=10, eval_draws=2, n_queries=50)
    step3 = [e for e in led.entries if "Step 3" in e.note]
    assert len(calls) == 1 and len(step3) == 1 and plugin.importance_fits == 1
    assert step3[0].eps == pytest.approx(2.0)  # seed mode: Lap(1/eps1), L1 sensitivity 2
    releases = [e for e in led.entries if e.mechanism == "correlated_laplace"]
    assert len(releases) == 3 and all(e.eps == pytest.approx(0.5 * 50) for e in releases)
    assert plugin.claims() == "heuristic"
    m = evaluate.metrics_for(plugin, titanic, titanic, np.random.default_rng(0))
    assert m["n_features_final_adjusted_set_A"] == len(plugin.final) and m["mae"] >= 0


def test_budget_split_and_baselines(titanic):
    small = titanic.subset(np.arange(300))
    plugin, led = _fit("crfs", small, eps=2.0, n_estimators=10, eval_draws=2, sensitivity_mode="global_l1")
    assert led.spent()[0] == pytest.approx(2.0)  # Step 3 half, the release the rest
    assert [e.eps for e in led.entries] == pytest.approx([1.0, 1.0])
    zhu, led_z = _fit("cdp_zhu", small, eps=1.0, n_estimators=10)
    group, _ = _fit("cdp_group", small, eps=1.0, n_estimators=10)
    assert zhu.kappa_release <= group.kappa_release
    assert led_z.entries[0].sensitivity == pytest.approx(zhu.kappa_release * 2 / (len(small) * zhu.cfg.lam))
    free, led_f = _fit("cdp_nonprivate", small, eps=1.0, n_estimators=10)
    assert not led_f.entries and free.claims() == "none"
    with pytest.raises(BudgetExceeded):
        _fit("crfs", small, eps=1.0, eps1=1.0, n_estimators=10)
    with pytest.raises(ConfigError, match="Step 3 takes the whole budget"):
        _fit("crfs", small, eps=1.0, eps1=0.5, n_estimators=10)  # Step 3 alone would take 2 eps1 = 2 > 1


def test_memoised_pieces_change_nothing(titanic):
    from privfair_cli.algorithms import crfs

    small = titanic.subset(np.arange(250))
    over = dict(n_estimators=10, eval_draws=2, eps1=1.0, eps_release=0.5, noise_draws=2)
    crfs._CACHE.clear()
    cold, led_cold = _fit("crfs", small, **over)
    warm, led_warm = _fit("crfs", small, **over)  # every deterministic piece now from the cache
    crfs.CACHE["enabled"] = False
    try:
        off, _ = _fit("crfs", small, **over)
    finally:
        crfs.CACHE["enabled"] = True
    for other in (warm, off):
        assert np.array_equal(other.final, cold.final) and np.array_equal(other.W, cold.W)
    assert [e.eps for e in led_warm.entries] == [e.eps for e in led_cold.entries]
