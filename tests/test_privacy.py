"""Mechanisms have the claimed noise scale; the ledger composes and refuses to overspend."""

import math

import numpy as np
import pytest
from scipy import stats

from privfair_cli.errors import BudgetExceeded, ConfigError
from privfair_cli.privacy import (
    Budget,
    PrivacyLedger,
    accountants,
    exponential,
    gaussian,
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
    gaussian_zcdp,
    laplace,
)
from privfair_cli.privacy.mechanisms import exponential_probabilities


def rng(seed=0):
    return np.random.default_rng(seed)


def test_laplace_scale_ks():
    ledger = PrivacyLedger(Budget(0.5))
    noise = laplace(np.zeros(20000), sensitivity=2.0, eps=0.5, rng=rng(), ledger=ledger)
    assert stats.kstest(noise, "laplace", args=(0, 4.0)).pvalue > 1e-3
    assert stats.kstest(noise, "laplace", args=(0, 3.0)).pvalue < 1e-6  # a wrong scale is detected
    assert ledger.spent() == (0.5, 0.0)
    assert ledger.entries[0].sensitivity == 2.0


def test_gaussian_classic_scale_ks():
    sigma = gaussian_sigma_classic(1.0, 0.5, 1e-5)
    assert sigma == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 0.5)
    ledger = PrivacyLedger(Budget(0.5, 1e-5))
    noise = gaussian(np.zeros(20000), 1.0, 0.5, 1e-5, rng(1), ledger)
    assert stats.kstest(noise, "norm", args=(0, sigma)).pvalue > 1e-3
    assert ledger.spent() == (0.5, 1e-5)


def test_gaussian_classic_refuses_eps_ge_1():
    with pytest.raises(ConfigError):
        gaussian_sigma_classic(1.0, 1.0, 1e-5)


@pytest.mark.parametrize("eps,delta", [(0.5, 1e-5), (1.0, 1e-5), (4.0, 1e-6)])
def test_gaussian_analytic_meets_exact_profile(eps, delta):
    sigma = gaussian_sigma_analytic(1.0, eps, delta)
    # the exact privacy profile (Balle & Wang 2018, Thm 8), written independently with scipy.stats
    def profile(s):
        return stats.norm.cdf(0.5 / s - eps * s) - math.exp(eps) * stats.norm.cdf(-0.5 / s - eps * s)
    assert profile(sigma) == pytest.approx(delta, rel=1e-6)
    assert profile(sigma * 0.99) > delta
    if eps < 1:
        assert sigma < gaussian_sigma_classic(1.0, eps, delta)


def test_exponential_frequencies_chi_square():
    scores = np.array([0.0, 1.0, 2.0, 3.0, -np.inf])
    p = exponential_probabilities(scores, sensitivity=1.0, eps=1.0)
    assert p[-1] == 0
    assert p[:4] == pytest.approx(np.exp(scores[:4] / 2) / np.exp(scores[:4] / 2).sum())
    draws = 20000
    ledger = PrivacyLedger(Budget(draws * 1.0))
    g = rng(2)
    picks = np.array([exponential(scores, 1.0, 1.0, g, ledger) for _ in range(draws)])
    counts = np.bincount(picks, minlength=5)
    assert counts[-1] == 0
    assert stats.chisquare(counts[:4], draws * p[:4]).pvalue > 1e-3
    assert ledger.spent()[0] == pytest.approx(draws)


def test_ledger_rejects_overspend_before_release():
    ledger = PrivacyLedger(Budget(1.0))
    laplace(np.zeros(3), 1.0, 0.6, rng(), ledger)
    with pytest.raises(BudgetExceeded):
        laplace(np.zeros(3), 1.0, 0.6, rng(), ledger)
    assert len(ledger.entries) == 1  # the refused release was not recorded
    ledger.check()
    laplace(np.zeros(3), 1.0, 0.4, rng(), ledger)
    assert ledger.spent()[0] == pytest.approx(1.0)


def test_ledger_rejects_delta_overspend():
    ledger = PrivacyLedger(Budget(0.9, 1e-6))
    with pytest.raises(BudgetExceeded):
        gaussian(np.zeros(2), 1.0, 0.5, 1e-5, rng(), ledger)


def test_zcdp_ledger_composition():
    ledger = PrivacyLedger(Budget(1.0, 1e-9), accountant="zcdp")
    rho = accountants.cdp_rho(1.0, 1e-9)
    sigma = math.sqrt(1 / (2 * rho * 0.5))
    gaussian_zcdp(np.zeros(2), 1.0, sigma, rng(), ledger)  # half of rho
    gaussian_zcdp(np.zeros(2), 1.0, sigma, rng(), ledger)  # the other half
    assert ledger.rho() == pytest.approx(rho)
    assert ledger.spent()[0] == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(BudgetExceeded):
        gaussian_zcdp(np.zeros(2), 1.0, sigma, rng(), ledger)


def test_cdp_conversions_are_consistent():
    for rho in (0.001, 0.05, 0.5, 2.0):
        eps = accountants.cdp_eps(rho, 1e-6)
        assert accountants.cdp_delta(rho, eps) == pytest.approx(1e-6, rel=1e-3)
        assert eps < accountants.zcdp_eps_classic(rho, 1e-6)
        assert accountants.cdp_rho(eps, 1e-6) == pytest.approx(rho, rel=1e-6)


def test_rdp_conversion_matches_dp_accounting():
    dp_accounting = pytest.importorskip("dp_accounting")
    orders = np.arange(2, 129)
    sigma = 2.0
    acc = dp_accounting.rdp.RdpAccountant(orders=list(orders.astype(float)))
    acc.compose(dp_accounting.GaussianDpEvent(sigma), 10)
    rdp = 10 * orders / (2 * sigma**2)
    ours, _ = accountants.rdp_to_dp(orders, rdp, 1e-5, "balle2020")
    assert ours == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
    classic, _ = accountants.rdp_to_dp(orders, rdp, 1e-5, "classic")
    assert classic > ours


def test_unknown_accountant_and_missing_delta():
    with pytest.raises(ConfigError):
        PrivacyLedger(Budget(1.0), accountant="advanced")
    with pytest.raises(ConfigError):
        PrivacyLedger(Budget(1.0, 0.0), accountant="zcdp")


# ------------------------------------------------------------------------------ guarantee, warnings, noise fields
def run_cli(tmp_path, monkeypatch, *overrides):
    """One in-process `privfair run` into tmp_path/out; (exit code, metrics.json or None)."""
    import json

    from privfair_cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRIVFAIR_PROGRESS", "off")
    code = main(["run", *overrides, "hydra.run.dir=out"])
    path = tmp_path / "out" / "metrics.json"
    return code, (json.loads(path.read_text()) if path.is_file() else None)


def test_result_states_guarantee_noise_and_warnings(tmp_path, monkeypatch):
    # no capsys here: an in-process Hydra run reconfigures logging, and absl's handler (imported with
    # dp_accounting) then closes the stream it captured when capsys has replaced sys.stderr
    code, rec = run_cli(tmp_path, monkeypatch, "algo=privpc", "data=synthetic_categorical", "data.n=300")
    assert code == 0
    assert rec["guarantee"] in ("eps-DP", "heuristic")
    assert rec["privacy"]["noise"] == "seeded"
    assert isinstance(rec["warnings"], list)


def test_run_prints_guarantee_and_warnings(capsys, tmp_path):
    from privfair_cli.main import _print_record

    rec = {"algo": "lr", "data": "toy", "eps": 1.0, "seed": 0, "metrics": {"accuracy": 0.5},
           "privacy": {"eps_spent": 1.0, "noise": "seeded"}, "guarantee": "heuristic",
           "warnings": ["first premise failed", "second premise failed"], "timings": {"total": 0.1}}
    _print_record(rec, tmp_path)
    out = capsys.readouterr().out
    assert "guarantee: heuristic (noise: seeded)" in out
    assert "warning: first premise failed\nwarning: second premise failed" in out
