"""Mechanisms have the claimed noise scale; the ledger composes and refuses to overspend."""

import json
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
    noise_source,
)
from privfair_cli.privacy import ledger as ledger_mod
from privfair_cli.privacy.mechanisms import exponential_probabilities
from privfair_cli.privacy.noise import NoiseSource


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


# ------------------------------------------------------------------------------ bisection (issue 13 item 3)
# Values of the four bisection loops before they were written once as `accountants.bisect` (float.hex, exact).
PINNED = [
    ('cdp_delta', (0.0001, 0.1), '0x1.7f3cde2cf292cp-47'),
    ('cdp_delta', (0.0001, 1.0), '0x0.0p+0'),
    ('cdp_delta', (0.05, 0.1), '0x1.226c17802486ep-3'),
    ('cdp_delta', (0.05, 1.0), '0x1.947203e7a0b88p-12'),
    ('cdp_delta', (0.05, 8.0), '0x1.40978848ec9b9p-464'),
    ('cdp_delta', (0.5, 0.1), '0x1.0e5abb587c82dp-1'),
    ('cdp_delta', (0.5, 1.0), '0x1.f98a91aecd817p-3'),
    ('cdp_delta', (0.5, 8.0), '0x1.f5ec0caf2e610p-46'),
    ('cdp_delta', (2.0, 1.0), '0x1.8a82d0d6671ffp-1'),
    ('cdp_delta', (2.0, 8.0), '0x1.068456db6ea3fp-9'),
    ('cdp_delta', (37.0, 1.0), '0x1.0000000000000p+0'),
    ('cdp_eps', (0.0001, 1e-09), '0x1.30970a476e4d5p-4'),
    ('cdp_eps', (0.0001, 1e-05), '0x1.7107600de9e83p-5'),
    ('cdp_eps', (0.05, 1e-09), '0x1.e1b47d244adc9p+0'),
    ('cdp_eps', (0.05, 1e-05), '0x1.4ee0d7fe14b3ap+0'),
    ('cdp_eps', (0.5, 1e-09), '0x1.9e5729c8c2320p+2'),
    ('cdp_eps', (2.0, 1e-05), '0x1.5731c2568da18p+3'),
    ('cdp_rho', (0.01, 1e-09), '0x1.193e93df142bbp-19'),
    ('cdp_rho', (0.01, 1e-05), '0x1.b71a161129136p-18'),
    ('cdp_rho', (1.0, 1e-09), '0x1.eaa31c83bc51cp-7'),
    ('cdp_rho', (1.0, 1e-05), '0x1.f4a3a64343227p-6'),
    ('cdp_rho', (10.0, 1e-09), '0x1.173dbb5f545a7p+0'),
    ('gaussian_sigma_analytic', (1.0, 0.5, 1e-05), '0x1.c20972c0b11a0p+2'),
    ('gaussian_sigma_analytic', (2.0, 1.0, 1e-05), '0x1.dd8556607a8e4p+2'),
    ('gaussian_sigma_analytic', (1.0, 4.0, 1e-06), '0x1.318a6f2302fd1p+0'),
    ('gaussian_sigma_analytic', (0.3, 0.05, 1e-09), '0x1.d587c86871325p+4'),
]


@pytest.mark.parametrize("name,args,expected", PINNED)
def test_bisections_keep_their_values(name, args, expected):
    from privfair_cli.privacy import mechanisms

    f = getattr(accountants, name, None) or getattr(mechanisms, name)
    assert f(*args) == float.fromhex(expected)


def test_bisect_finds_the_threshold_and_stops_at_the_fixed_point():
    calls = []

    def above(x):
        calls.append(x)
        return x >= math.pi

    lo, hi = accountants.bisect(above, 0.0, 4.0)
    assert lo < math.pi <= hi and hi == math.nextafter(lo, math.inf)
    assert len(calls) < 70  # stops once the midpoint no longer moves, long before max_iter
    assert accountants.bisect(above, 0.0, 4.0, max_iter=3) == (3.0, 3.5)


# ------------------------------------------------------------------------------ accountants x entry kinds (item 2)
SPENDS = {
    "pure": lambda led: led.spend_pure("m", 0.1),
    "approx": lambda led: led.spend_approx("m", 0.1, 1e-7),
    "zcdp": lambda led: led.spend_zcdp("m", 0.001),
    "rdp": lambda led: led.spend_rdp("m", 0.001 * np.asarray(led.orders, float)),
}
COMPOSES = {("basic", "pure"), ("basic", "approx"), ("zcdp", "pure"), ("zcdp", "zcdp"), ("rdp", "pure"),
            ("rdp", "zcdp"), ("rdp", "rdp")}


@pytest.mark.parametrize("accountant", ["basic", "zcdp", "rdp"])
@pytest.mark.parametrize("kind", list(SPENDS))
def test_every_accountant_composes_or_refuses_every_entry_kind(accountant, kind):
    ledger = PrivacyLedger(Budget(10.0, 1e-5), accountant=accountant)
    if (accountant, kind) not in COMPOSES:
        with pytest.raises(ConfigError) as err:
            SPENDS[kind](ledger)
        assert "\n" not in str(err.value) and ledger.entries == []
        return
    SPENDS[kind](ledger)
    eps1, _ = ledger.spent()
    SPENDS[kind](ledger)
    eps2, _ = ledger.spent()
    assert 0 < eps1 < eps2  # each accepted entry counts, and a second one costs more


def test_rdp_accounts_zcdp_entries_as_rho_alpha():
    """Issue 11 item 2: under rdp, rho-zCDP entries were counted as zero (mst eps=1 reported eps_spent 0.081)."""
    ledger = PrivacyLedger(Budget(1.0, 1e-9), accountant="rdp")
    rho = accountants.cdp_rho(1.0, 1e-9)
    ledger.spend_zcdp("gaussian", rho / 2)
    assert ledger.rdp() == pytest.approx(rho / 2 * np.asarray(ledger.orders, float))
    eps, _ = ledger.spent()
    assert 0.6 < eps < 1.0
    with pytest.raises(BudgetExceeded):
        ledger.spend_zcdp("gaussian", 1000.0)
    assert len(ledger.entries) == 1


def test_rdp_ledger_matches_dp_accounting_for_zcdp_and_gaussian():
    dp_accounting = pytest.importorskip("dp_accounting")
    orders = accountants.DEFAULT_RDP_ORDERS
    sigma, k, delta = 3.0, 7, 1e-6
    ledger = PrivacyLedger(Budget(100.0, delta), accountant="rdp", rdp_conversion="balle2020")
    for _ in range(k):
        ledger.spend_zcdp("gaussian", 1 / (2 * sigma**2))
    for event in (dp_accounting.GaussianDpEvent(sigma), dp_accounting.ZCDpEvent(1 / (2 * sigma**2))):
        ref = dp_accounting.rdp.RdpAccountant(orders=[float(a) for a in orders])
        ref.compose(event, k)
        assert ledger.spent()[0] == pytest.approx(ref.get_epsilon(delta), rel=1e-9)


def test_pure_dp_rdp_is_a_valid_bound_checked_against_dp_accounting():
    """eps-DP -> RDP: min(eps, a eps^2/2) is exactly min(eps, the RDP of eps^2/2-zCDP) (dp-accounting's ZCDpEvent),
    and no smaller than the exact RDP of the Laplace mechanism (dp-accounting's LaplaceDpEvent), the eps-DP
    mechanism it must cover."""
    dp_accounting = pytest.importorskip("dp_accounting")
    orders = [float(a) for a in accountants.DEFAULT_RDP_ORDERS]
    for eps in (0.05, 0.5, 2.0):
        ours = accountants.pure_dp_rdp(eps, orders)
        zc = dp_accounting.rdp.RdpAccountant(orders=orders)
        zc.compose(dp_accounting.ZCDpEvent(eps**2 / 2))
        lap = dp_accounting.rdp.RdpAccountant(orders=orders)
        lap.compose(dp_accounting.LaplaceDpEvent(1 / eps))
        assert ours == pytest.approx(np.minimum(eps, zc._rdp), rel=1e-12)
        assert (ours >= lap._rdp * (1 - 1e-12)).all()
        ledger = PrivacyLedger(Budget(100.0, 1e-6), accountant="rdp", rdp_conversion="balle2020")
        ledger.spend_pure("laplace", eps)
        assert ledger.spent()[0] >= lap.get_epsilon(1e-6) * (1 - 1e-9)


def test_ledger_rejects_negative_or_nan_spends():
    for accountant, spend in (("basic", lambda led: led.spend_approx("m", -1.0, 0.0)),
                              ("basic", lambda led: led.spend_approx("m", 0.1, float("nan"))),
                              ("zcdp", lambda led: led.spend_zcdp("m", -0.1)),
                              ("zcdp", lambda led: led.spend_zcdp("m", float("nan"))),
                              ("rdp", lambda led: led.spend_rdp("m", -np.ones(len(led.orders))))):
        ledger = PrivacyLedger(Budget(1.0, 1e-5), accountant=accountant)
        with pytest.raises(BudgetExceeded):
            spend(ledger)
        assert ledger.entries == []


def test_zcdp_left_calibrates_under_zcdp_and_rdp():
    for accountant in ("zcdp", "rdp"):
        ledger = PrivacyLedger(Budget(1.0, 1e-9), accountant=accountant)
        ledger.spend_pure("laplace", 0.1)
        rho = ledger.zcdp_left()
        ledger.spend_zcdp("gaussian", rho)
        assert ledger.spent()[0] == pytest.approx(1.0, rel=1e-6)
        with pytest.raises(BudgetExceeded):
            ledger.spend_zcdp("gaussian", rho * 1e-3)
    assert PrivacyLedger(Budget(1.0, 1e-9), "zcdp").zcdp_left() == accountants.cdp_rho(1.0, 1e-9)


# ------------------------------------------------------------------------------ eps = inf and huge eps (item 5)
@pytest.mark.parametrize("accountant", ["basic", "zcdp", "rdp"])
def test_noise_free_limit_is_recorded_and_written_as_a_number(accountant):
    ledger = PrivacyLedger(Budget(math.inf, 1e-5), accountant=accountant)
    assert (laplace([1.0, 2.0], 1.0, math.inf, rng(), ledger) == [1.0, 2.0]).all()
    if accountant != "basic":
        assert (gaussian_zcdp([1.0], 1.0, 0.0, rng(), ledger) == [1.0]).all()
    assert exponential([0.0, 3.0, 3.0, -1.0], 1.0, math.inf, rng(), ledger) in (1, 2)
    assert ledger.spent()[0] == math.inf
    ledger.check()
    out = ledger.to_dict()
    assert out["eps_spent"] == ledger_mod.INF_JSON == 1.7976931348623157e308
    assert ledger_mod.from_json(json.loads(json.dumps(out))["eps_spent"]) == math.inf
    assert all(e.get("eps", 0) in (0, ledger_mod.INF_JSON) for e in out["ledger"])


def test_noise_free_limit_of_the_gaussian_calibrations():
    for calibration in ("classic", "analytic"):
        ledger = PrivacyLedger(Budget(math.inf, 1e-5))
        assert (gaussian([5.0], 1.0, math.inf, 1e-5, rng(), ledger, calibration=calibration) == [5.0]).all()
    assert accountants.cdp_rho(math.inf, 1e-9) == math.inf and accountants.cdp_eps(math.inf, 1e-9) == math.inf


def test_exponential_at_eps_inf_is_uniform_over_the_best():
    p = exponential_probabilities([1.0, 5.0, 5.0, -np.inf], 1.0, math.inf)
    assert list(p) == [0.0, 0.5, 0.5, 0.0]


@pytest.mark.parametrize("accountant", ["basic", "zcdp", "rdp"])
def test_huge_finite_eps_does_not_overflow(accountant):
    """eps=1e300 raised OverflowError in the ledger (eps**2 of a Python float)."""
    ledger = PrivacyLedger(Budget(1e300, 1e-5), accountant=accountant)
    if accountant == "zcdp":
        ledger.spend_zcdp("gaussian", ledger.zcdp_left())
    else:
        laplace(np.zeros(3), 1.0, 1e300, rng(), ledger)
    eps, _ = ledger.spent()
    assert 1e299 < eps <= 1e300 * (1 + 1e-9)
    assert json.loads(json.dumps(ledger.to_dict()))["eps_spent"] == eps
    with pytest.raises(BudgetExceeded):
        PrivacyLedger(Budget(1.0, 1e-5), accountant=accountant).spend_pure("laplace", 1e300)


def test_refused_infinite_spend_leaves_the_totals_intact():
    ledger = PrivacyLedger(Budget(1.0, 1e-5), accountant="zcdp")
    ledger.spend_zcdp("gaussian", 0.01)
    before = ledger.spent()
    with pytest.raises(BudgetExceeded):
        ledger.spend_zcdp("gaussian", math.inf)
    assert ledger.spent() == before and ledger.rho() == 0.01


# ------------------------------------------------------------------------------ noise sources (item 4)
def test_seeded_source_draws_exactly_what_the_generator_drew():
    """Seeded mode keeps every result: the mechanisms draw the same numbers as before the NoiseSource."""
    a = laplace(np.zeros(5), 1.0, 0.5, rng(7), PrivacyLedger(Budget(1.0)))
    assert (a == rng(7).laplace(0.0, 2.0, size=5)).all()
    src = NoiseSource.for_run(rng(7), secure=False)
    assert src.kind == "seeded" and (src.add_gaussian(np.ones(3), 2.0) == 1 + rng(7).normal(0.0, 2.0, size=3)).all()
    scale = np.array([1.0, 2.0, 3.0])
    assert (noise_source(rng(3)).add_laplace(np.zeros(3), scale) == rng(3).laplace(0.0, 1.0, 3) * scale).all()


def test_secure_source_is_not_the_seed():
    a, b = NoiseSource.for_run(rng(1), secure=True), NoiseSource.for_run(rng(1), secure=True)
    assert a.kind == "secure"
    assert a.integers(2**62) != b.integers(2**62)
    assert (a.add_laplace(np.zeros(4), 1.0) != b.add_laplace(np.zeros(4), 1.0)).any()


def test_secure_source_refuses_float_samplers_and_own_noise():
    src = NoiseSource.for_run(rng(), secure=True)
    for draw in (lambda: src.laplace(0, 1, 3), lambda: src.normal(size=2), lambda: src.gumbel()):
        with pytest.raises(ConfigError, match="privacy.secure=true"):
            draw()
    with pytest.raises(ConfigError, match="cannot cover DP-SGD's torch noise"):
        src.own_noise_generator("DP-SGD's torch noise")
    src.permutation(5)  # randomness that is not noise stays available
    seeded = NoiseSource.for_run(rng(), secure=False)
    assert seeded.own_noise_generator("x") is seeded and seeded.laplace(0, 1) != 0


def test_secure_laplace_and_gaussian_scales_ks():
    pytest.importorskip("opendp")
    src = NoiseSource.for_run(rng(), secure=True)
    lap = src.add_laplace(np.zeros(4000), 4.0)
    assert stats.kstest(lap, "laplace", args=(0, 4.0)).pvalue > 1e-3
    assert stats.kstest(lap, "laplace", args=(0, 3.0)).pvalue < 1e-3  # a wrong scale is detected
    gau = src.add_gaussian(np.full(3000, 10.0), 2.5)
    assert stats.kstest(gau, "norm", args=(10.0, 2.5)).pvalue > 1e-3
    assert stats.kstest(gau, "norm", args=(10.0, 3.0)).pvalue < 1e-3
    mixed = src.add_laplace(np.zeros(4000), np.repeat([0.0, 1.0], 2000))  # per-coordinate scales, 0 = no noise
    assert (mixed[:2000] == 0).all() and stats.kstest(mixed[2000:], "laplace", args=(0, 1.0)).pvalue > 1e-3


def test_secure_exponential_frequencies_chi_square():
    pytest.importorskip("opendp")
    src = NoiseSource.for_run(rng(), secure=True)
    scores = np.array([0.0, 1.0, 2.0, 3.0, -np.inf])
    p = exponential_probabilities(scores, 1.0, 2.0)
    draws = 3000
    ledger = PrivacyLedger(Budget(draws * 2.0))
    counts = np.bincount([exponential(scores, 1.0, 2.0, src, ledger) for _ in range(draws)], minlength=5)
    assert counts[-1] == 0
    assert stats.chisquare(counts[:4], draws * p[:4]).pvalue > 1e-3


def test_secure_gaussian_mechanism_meets_its_budget_through_zcdp():
    """In secure mode the (eps, delta) Gaussian is the discrete Gaussian, proven through its zCDP bound."""
    pytest.importorskip("opendp")
    from privfair_cli.privacy.mechanisms import gaussian_sigma_zcdp

    for eps, delta, calibration in ((0.5, 1e-5, "classic"), (2.0, 1e-6, "analytic")):
        src = NoiseSource.for_run(rng(), secure=True)
        ledger = PrivacyLedger(Budget(eps, delta))
        noisy = gaussian(np.zeros(3000), 1.0, eps, delta, src, ledger, calibration=calibration)
        sigma = max(gaussian_sigma_zcdp(1.0, eps, delta),
                    {"classic": gaussian_sigma_classic, "analytic": gaussian_sigma_analytic}[calibration](1.0, eps,
                                                                                                      delta))
        assert accountants.cdp_delta(1 / (2 * sigma**2), eps) <= delta * (1 + 1e-6)
        assert stats.kstest(noisy, "norm", args=(0, sigma)).pvalue > 1e-3


# ------------------------------------------------------------------------------ run config: delta, secure, eps=inf
def validated(*overrides):
    from privfair_cli import schema
    from privfair_cli.compose import compose

    return schema.validate(compose(list(overrides)))


def test_default_delta_is_resolved_and_recorded():
    """Issue 12 item 1: (eps, delta) algorithms no longer refuse without delta."""
    rc = validated("algo=relaxed_fm")
    assert (rc.delta, rc.delta_source) == (1e-5, "default")
    rc = validated("algo=mst")
    assert rc.delta_source == "algorithm" and rc.delta == registry_get("mst").default_delta
    assert (validated("algo=relaxed_fm", "delta=1e-7").delta, validated("algo=lr").delta) == (1e-7, 0.0)
    for algo in ("privlr", "lr"):  # an (eps, delta) conversion needs a delta too, found before any data is read
        rc = validated(f"algo={algo}", "budget.accountant=rdp")
        assert (rc.accountant, rc.delta, rc.delta_source) == ("rdp", 1e-5, "default")


def registry_get(name):
    from privfair_cli import registry

    return registry.get(name)


def test_eps_inf_and_secure_mode_validate():
    rc = validated("algo=privlr", "eps=inf", "privacy.secure=true")
    assert rc.eps == math.inf and rc.secure
    assert not validated("algo=privlr").secure


def test_pld_entry_states_its_mechanism_and_names_the_key_under_other_ledgers():
    """`spend_pld`: one (eps, delta) entry whose extra carries the mechanism, seen complete by the ledger's observers;
    under a ledger that cannot add up (eps, delta) the error names the config key that chose PLD."""
    seen = []
    ledger_mod.OBSERVERS.append(lambda _led, entry: seen.append(dict(entry.extra)))
    try:
        led = PrivacyLedger(Budget(1.0, 1e-5))
        led.spend_pld("subsampled_gaussian", 0.9, 1e-5, "algo.x_accounting", {"accountant": "pld", "sigma": 2.0},
                      sensitivity=1.0)
    finally:
        ledger_mod.OBSERVERS.pop()
    (entry,) = led.entries
    assert (entry.eps, entry.delta, entry.sensitivity) == (0.9, 1e-5, 1.0)
    assert seen == [entry.extra] == [{"accountant": "pld", "sigma": 2.0}]
    with pytest.raises(BudgetExceeded):
        led.spend_pld("subsampled_gaussian", 0.2, 0.0, "algo.x_accounting", {})
    with pytest.raises(ConfigError, match=r"algo.x_accounting=pld .* rdp ledger .* set algo.x_accounting=rdp"):
        PrivacyLedger(Budget(1.0, 1e-5), accountant="rdp").spend_pld("m", 0.5, 1e-6, "algo.x_accounting", {})


def test_warning_when_delta_is_not_below_one_over_n():
    from privfair_cli.runner import premise_warnings

    ledger = PrivacyLedger(Budget(1.0, 1e-3))
    ledger.spend_approx("gaussian", 0.5, 1e-3)
    (line,) = premise_warnings(ledger, 2000)
    assert "delta=0.001 >= 1/n_train=0.0005" in line
    assert premise_warnings(ledger, 500) == []


def test_noise_free_run_is_written_as_a_number_with_guarantee_none(tmp_path, monkeypatch):
    code, rec = run_cli(tmp_path, monkeypatch, "algo=privpc_star", "data=synthetic_gaussian", "data.n=300",
                        "eps=inf")
    assert code == 0
    assert rec["eps"] == rec["privacy"]["eps_spent"] == 1.7976931348623157e308
    assert rec["guarantee"] == "none" and rec["privacy"]["noise"] == "seeded"
    assert ledger_mod.from_json(rec["eps"]) == math.inf


def test_secure_run_says_so(tmp_path, monkeypatch):
    pytest.importorskip("opendp")
    code, rec = run_cli(tmp_path, monkeypatch, "algo=privpc_star", "data=synthetic_gaussian", "data.n=300",
                        "privacy.secure=true")
    assert code == 0 and rec["privacy"]["noise"] == "secure" and rec["guarantee"] in ("eps-DP", "heuristic")


@pytest.mark.parametrize("rho", [1e-4, 0.3, 7.0])
def test_zcdp_sizing_inverts_the_charges(rho):
    """The Gaussian's sigma and the exponential mechanism's eps sized for rho spend exactly rho (the charges of
    `gaussian_zcdp` and `exponential(accounting="zcdp")`); the classic rho converts back to its eps."""
    for sq in (1, 3, 91):
        assert sq / (2 * accountants.zcdp_sigma(rho, sq) ** 2) == pytest.approx(rho, rel=1e-12)
    for rounds in (1, 13):
        assert rounds * accountants.zcdp_exponential_eps(rho, rounds) ** 2 / 8 == pytest.approx(rho, rel=1e-12)
    eps = 10 * rho
    assert accountants.zcdp_eps_classic(accountants.zcdp_rho(eps, 1e-9, "rdp_classic"), 1e-9) == pytest.approx(eps)
    assert accountants.zcdp_rho(math.inf, 1e-9) == math.inf and accountants.zcdp_sigma(math.inf) == 0.0
    with pytest.raises(ValueError, match="cks20, rdp_classic"):
        accountants.zcdp_rho(1.0, 1e-9, "other")
