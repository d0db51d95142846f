"""Functional-mechanism LR family (pflr.md, pdfc.md): sensitivities, the heterogeneous release, noise-free limits,
noise laws, configs, fairness, and a reproduction check against the published Table 8.1."""

import math

import numpy as np
import pytest
from scipy.optimize import minimize

from privfair_cli import datasets as data_lib
from privfair_cli import metrics, registry
from privfair_cli.algorithms import functional as fm
from privfair_cli.errors import BudgetExceeded, ConfigError, DataError
from privfair_cli.privacy import Budget, PrivacyLedger, mechanisms
from tests.conftest import fit, needs_data, table

CENSUS = {"adult": "adult", "dutch": "dutch_census", "compas": "compas", "german": "german_credit",
               "bank": "bank_marketing"}


# ------------------------------------------------------------------------------------------ helpers
def toy(n=400, d=6, seed=0, roles=None):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    s = (rng.random(n) < 0.6).astype(int)
    X[:, :2] = np.clip(X[:, :2] + 0.4 * s[:, None], 0, 1)  # features that carry s
    y = (X @ rng.normal(size=d) + 0.8 * s + 0.3 * rng.normal(size=n) > 0.5).astype(int)
    return data_lib.Table("toy", X, y, s, [f"f{j}" for j in range(d)], roles=roles or {})


def release(algo, data, budget, seed=0, **params):
    """One coefficient release of `algo` on `data`: (noisy polynomial, plugin, ledger)."""
    plugin = registry.make(algo, **params)
    ledger = PrivacyLedger(budget)
    poly, _ = plugin.release(plugin.design(data.X), data, budget, ledger, np.random.default_rng(seed))
    return poly, plugin, ledger


# ------------------------------------------------------------------------------------------ sensitivities
@pytest.mark.parametrize("d, f, f_tilde, g", [(40, 440, 520, 80), (35, 341.25, 411.25, 70)])
def test_thesis_sensitivities(d, f, f_tilde, g):
    assert fm.delta_f(d) == f and fm.delta_f_tilde(d) == f_tilde and fm.delta_g(d) == g


@pytest.mark.parametrize("d, l1, l1_fair, l2, l2_fair", [(12, 48, 72, 4.583, 10.817), (40, 440, 520, 11.832, 21.448)])
def test_ding_sensitivities(d, l1, l1_fair, l2, l2_fair):
    assert fm.delta_f(d) == l1 and fm.delta_f_tilde(d) == l1_fair
    assert fm.delta_2(d) == pytest.approx(l2, abs=5e-4) and fm.delta_2_fair(d) == pytest.approx(l2_fair, abs=5e-4)


@pytest.mark.parametrize("quad_index", ["ordered", "unique"])
def test_per_coefficient_sensitivities_add_up_to_the_lemmas(quad_index):
    """The per-coefficient bounds the heterogeneous release uses: L1 sum = Lemmas 1-2, L2 norm = Lemmas 3-4."""
    d = 9
    plain, fair = fm.coefficient_sensitivities(d, 0.5, quad_index), fm.coefficient_sensitivities(d, 1.5, quad_index)
    assert plain.sum() == pytest.approx(fm.delta_f(d)) and fair.sum() == pytest.approx(fm.delta_f_tilde(d))
    if quad_index == "ordered":  # Ding's L2 lemmas count the d^2 ordered entries
        assert np.linalg.norm(plain) == pytest.approx(fm.delta_2(d))
        assert np.linalg.norm(fair) == pytest.approx(fm.delta_2_fair(d))


def test_sensitivity_is_twice_the_largest_row_mass():
    """Delta = 2 max_t sum_phi |lambda_phi(t)|, attained by x = 1, y = 0 (and |s - s_bar| = 1 for the fair one)."""
    d = 7
    x, one = np.ones((1, d)), np.ones(1)
    assert 2 * np.abs(fm.lr_polynomial(x, 0 * one).pack()).sum() == fm.delta_f(d)
    fair = fm.Polynomial(fm.lr_polynomial(x, 0 * one).b + x[0], fm.lr_polynomial(x, 0 * one).M)
    assert 2 * np.abs(fair.pack()).sum() == fm.delta_f_tilde(d)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 3.0])
def test_penalty_weight_sensitivity_is_twice_the_largest_row_mass(alpha):
    """Eq. 8.3 with a general alpha: |1/2 - y + alpha (s - s_bar)| x_l <= 1/2 + alpha, attained at x = 1, y = 0."""
    d = 5
    x, y = np.ones((1, d)), np.zeros(1)
    worst = fm.Polynomial(fm.lr_polynomial(x, y).b + alpha * x[0], fm.lr_polynomial(x, y).M)
    assert 2 * np.abs(worst.pack()).sum() == fm.delta_f_tilde(d, alpha)
    assert fm.delta_f_tilde(d, 1.0) == fm.delta_f_tilde(d)


def test_extended_gaussian_sigma_meets_its_target():
    """pdfc.md §1.4: eps = 1, delta = 1e-3 gives 3.7877 Delta, and the exact profile of a release at that sigma
    (computed by the heterogeneous mechanism) meets the target."""
    assert fm.extended_gaussian_sigma(1.0, 1.0, 1e-3) == pytest.approx(3.7877, abs=1e-4)
    for eps in (0.01, 0.1, 1, 10):
        for delta in (1e-3, 1e-5):
            sigma = fm.extended_gaussian_sigma(1.0, eps, delta)
            ledger = PrivacyLedger(Budget(eps, delta))
            _, exact = mechanisms.heterogeneous(np.zeros(1), 1.0, sigma, np.random.default_rng(0), ledger,
                                                noise="gaussian", eps=eps)
            assert 0 < exact <= delta


# ------------------------------------------------------------------------------------------ the heterogeneous release
def test_heterogeneous_release_records_before_drawing():
    """A release past the budget raises before any noise is drawn: the noise stream is untouched."""
    rng = np.random.default_rng(3)
    ledger = PrivacyLedger(Budget(1.0))
    with pytest.raises(BudgetExceeded):
        mechanisms.heterogeneous(np.zeros(4), [1, 1, 1, 1], [1, 1, 1, 0.5], rng, ledger)  # loss 5 > 1
    assert ledger.entries == [] and rng.random() == np.random.default_rng(3).random()


def test_heterogeneous_laplace_loss_and_noise():
    """eps = sum_j s_j / b_j is recorded (or the larger claim); coordinate j gets Lap(b_j) noise."""
    sens, scales = np.array([1.0, 2.0, 0.5]), np.array([10.0, 40.0, 1.0])
    rng, noise = np.random.default_rng(9), []
    for _ in range(4000):
        ledger = PrivacyLedger(Budget(5.0))
        value, exact = mechanisms.heterogeneous(np.zeros(3), sens, scales, rng, ledger)
        noise.append(value)
    assert exact == pytest.approx(0.1 + 0.05 + 0.5) and ledger.entries[0].eps == exact
    assert ledger.entries[0].sensitivity == 3.5
    noise = np.array(noise)
    np.testing.assert_allclose(noise.std(axis=0) / (math.sqrt(2) * scales), 1, atol=0.06)
    claimed = PrivacyLedger(Budget(5.0))
    mechanisms.heterogeneous(np.zeros(3), sens, scales, np.random.default_rng(0), claimed, claim=2.0)
    assert claimed.entries[0].eps == 2.0


# ------------------------------------------------------------------------------------------ PDFC / ADFC accounting
def test_pdfc_worked_example():
    """pdfc.md §2.4: d = 12, eps = 1, ratio 0.1 -> eps_n 1.0811, eps_s 0.1081, Phi_s = 2d coefficients,
    eps_exact 0.963; the ledger records the paper's eps = 1 (the larger) with Delta_1 = 72."""
    plugin, ledger = fit("pdfc", toy(d=12), eps=1.0, xs_attribute="f3", eps_ratio=0.1)
    info = plugin.info
    assert (info["eps_n"], info["eps_s"]) == (pytest.approx(1.0811, abs=1e-4), pytest.approx(0.1081, abs=1e-4))
    assert info["phi_s_size"] == 24 and info["eps_exact"] == pytest.approx(0.963, abs=1e-3)
    [entry] = ledger.entries
    assert entry.eps == pytest.approx(1.0) and entry.sensitivity == 72 and "x_s=f3" in entry.note


def test_adfc_worked_example():
    """pdfc.md §2.5: d = 12, eps = 1, delta = 1e-3 -> sigma_s 385.66, sigma_n 39.79, exact delta(1) = 5.8e-6;
    the ledger records (1, 1e-3) with Delta_2' = 10.817."""
    plugin, ledger = fit("adfc", toy(d=12), eps=1.0, delta=1e-3, xs_attribute="f3", eps_ratio=0.1)
    info = plugin.info
    assert (info["sigma_s"], info["sigma_n"]) == (pytest.approx(385.66, abs=0.05), pytest.approx(39.79, abs=0.01))
    assert info["delta_exact"] == pytest.approx(5.8e-6, rel=0.05)
    [entry] = ledger.entries
    assert (entry.eps, entry.delta) == (pytest.approx(1.0), pytest.approx(1e-3))
    assert entry.sensitivity == pytest.approx(10.817, abs=1e-3)


def test_calibration_reaches_the_noise():
    """`algo.calibration` sets sigma_s and sigma_n, and the released noise has those deviations."""
    t = toy(n=50, d=4)
    half = 1 - math.sqrt(1 - 1e-3)
    stds = {}
    for calibration in ("extended", "analytic"):
        plugin = registry.make("adfc", xs_attribute="f1", eps_ratio=0.2, calibration=calibration)
        exact = fm.fair_polynomial(t.X, t.y, t.s).pack()
        rng, budget, draws = np.random.default_rng(2), Budget(1.0, 1e-3), []
        for _ in range(3000):
            poly, _ = plugin.release(t.X, t, budget, PrivacyLedger(budget), rng)
            draws.append(poly.pack() - exact)
        std, mask = np.std(np.array(draws), axis=0), fm.attribute_mask(t.feature_names, "f1")
        assert std[mask].mean() == pytest.approx(plugin.info["sigma_s"], rel=0.03)
        assert std[~mask].mean() == pytest.approx(plugin.info["sigma_n"], rel=0.03)
        stds[calibration] = plugin.info["sigma_n"]
    eps_s, eps_n = plugin.split(1.0, 4)
    assert stds["analytic"] == pytest.approx(mechanisms.gaussian_sigma_analytic(fm.delta_2_fair(4), eps_n, half))
    assert stds["analytic"] < stds["extended"]


def test_relaxed_fm_analytic_calibration_spends_exactly_delta():
    plugin, ledger = fit("relaxed_fm", toy(), eps=0.5, delta=1e-5, calibration="analytic")
    assert plugin.info["delta_exact"] == pytest.approx(1e-5, rel=1e-6)
    assert plugin.info["sigma"] == pytest.approx(mechanisms.gaussian_sigma_analytic(fm.delta_2(6), 0.5, 1e-5))
    assert ledger.entries[0].mechanism == "gaussian_heterogeneous"


def test_eps_ratio_above_one_is_refused_before_the_run():
    """B3: eps_ratio > 1 makes the paper's figure understate the loss; the exact loss then always exceeds eps."""
    with pytest.raises(ConfigError, match=r"algo.eps_ratio=5.0 is out of range; allowed: > 0 and <= 1"):
        registry.make("pdfc", eps_ratio=5.0)


# ------------------------------------------------------------------------------------------ xs_attribute
def test_xs_attribute_auto_takes_the_cards_protected_attribute():
    t = toy(roles={"protected": ["sex", "f4", "f2"]})
    assert fm.resolve_attribute("auto", t, np.random.default_rng(0)) == "f4"  # sex is not a feature
    without = toy()
    drawn = {fm.resolve_attribute("auto", without, np.random.default_rng(i)) for i in range(30)}
    assert drawn == set(without.feature_names)  # no protected feature: Algorithm 1's random choice
    assert fm.resolve_attribute("f1", t, np.random.default_rng(0)) == "f1"


@pytest.mark.parametrize("name", [pytest.param(n, marks=needs_data(d)) for n, d in CENSUS.items()])
def test_pdfc_and_adfc_run_with_defaults_on_every_census_dataset(name):
    """Issue 12: `xs_attribute: auto` resolves on each census card (Adult's classifier view has no race)."""
    train, test = table(name, n=3000)
    for algo, delta in (("pdfc", 0.0), ("adfc", 1e-5)):
        plugin, ledger = fit(algo, train, eps=1.0, delta=delta)
        names = fm.attributes(train.feature_names)
        protected = [a for a in (train.roles or {}).get("protected") or [] if a in names]
        assert plugin.attribute == protected[0] if protected else plugin.attribute in names
        assert ledger.spent()[0] <= 1.0 + 1e-9 and f"x_s={plugin.attribute}" in ledger.entries[0].note
        assert set(np.unique(plugin.predict(test.X))) <= {0, 1}


def test_auto_attribute_on_adult_race_is_race():
    """Ding Table 1's x_s: the adult_race card's first protected feature is race (all five race columns)."""
    t = toy(roles={"protected": ["sex", "race", "native-country"]})
    t.feature_names = ["age", "race=Black", "race=White", "native-country=United-States", "x", "y"]
    assert fm.resolve_attribute("auto", t, np.random.default_rng(0)) == "race"
    assert fm.attribute_mask(t.feature_names, "race").reshape(-1)[:6].tolist() == [0, 1, 1, 0, 0, 0]


# ------------------------------------------------------------------------------------------ bounds and data
def test_features_outside_the_unit_box_are_clipped_before_the_release():
    """Issue 11: the sensitivity assumes x in [0, 1]; unbounded features are clipped row by row first."""
    t = toy()
    wide = data_lib.Table("wide", 4 * t.X - 1.5, t.y, t.s, t.feature_names)
    clipped = data_lib.Table("clipped", np.clip(wide.X, 0, 1), t.y, t.s, t.feature_names)
    a, ledger = fit("privlr", wide, eps=2.0, seed=4)
    b, _ = fit("privlr", clipped, eps=2.0, seed=4)
    np.testing.assert_array_equal(a.w, b.w)
    assert ledger.entries[0].sensitivity == fm.delta_f(t.d)
    assert any("clipped into [0, 1]" in w for w in a.warnings()) and not b.warnings()


def test_fair_algorithms_need_a_sensitive_attribute():
    t = toy()
    with pytest.raises(DataError, match="algo=pflr needs a sensitive attribute"):
        fit("pflr", data_lib.Table("nos", t.X, t.y, None, t.feature_names))


# ------------------------------------------------------------------------------------------ noise-free limits
def test_minimise_matches_an_independent_solver():
    """The trimmed closed form equals BFGS on the Taylor objective (full-rank toy data)."""
    t = toy()
    poly = fm.lr_polynomial(t.X, t.y)
    w = fm.minimise(poly).w
    ref = minimize(lambda v: v @ poly.M @ v + poly.b @ v, np.zeros(t.d), jac=lambda v: 2 * poly.M @ v + poly.b,
                   method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose(w, ref, rtol=1e-6, atol=1e-8)


def test_trimming_handles_the_singular_one_hot_polynomial():
    """With a one-hot block plus a constant column X^T X is singular; trimming returns the min-norm minimiser."""
    rng = np.random.default_rng(1)
    block = np.eye(3)[rng.integers(0, 3, 300)]
    X = np.hstack([block, np.ones((300, 1)), rng.random((300, 2))])
    y = (rng.random(300) < 0.4).astype(float)
    poly = fm.lr_polynomial(X, y)
    np.testing.assert_allclose(fm.minimise(poly).w, -0.5 * np.linalg.pinv(poly.M) @ poly.b, atol=1e-8)


@pytest.mark.parametrize("algo, delta", [("privlr", 0.0), ("relaxed_fm", 1e-5)])
def test_plain_fm_at_infinite_eps_is_the_taylor_closed_form(algo, delta):
    t = toy()
    taylor, _ = fit("lr_taylor", t)
    private, ledger = fit(algo, t, eps=math.inf, delta=delta)
    np.testing.assert_allclose(private.w, taylor.w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(taylor.w, -0.5 * np.linalg.solve(t.X.T @ t.X / 8, t.X.T @ (0.5 - t.y)), rtol=1e-8)
    assert not any(math.isnan(e.eps) for e in ledger.entries)


@pytest.mark.parametrize("algo, delta", [("pflr", 0.0), ("pdfc", 0.0), ("adfc", 1e-5)])
def test_fair_fm_at_infinite_eps_is_the_penalised_closed_form(algo, delta):
    """pdfc.md §8: with the noise off, PFLR, PDFC and ADFC equal the noise-free penalised polynomial minimiser."""
    t = toy()
    private, _ = fit(algo, t, eps=math.inf, delta=delta, **({} if algo == "pflr" else {"xs_attribute": "f0"}))
    np.testing.assert_allclose(private.w, fm.minimise(fm.fair_polynomial(t.X, t.y, t.s)).w, rtol=1e-10)


def test_unique_quad_index_round_trips():
    t = toy(d=4)
    poly = fm.lr_polynomial(t.X, t.y)
    back = fm.Polynomial.unpack(poly.pack("unique"), 4, "unique")
    np.testing.assert_allclose(back.M, poly.M)
    assert len(poly.pack("unique")) == 4 + 10


# ------------------------------------------------------------------------------------------ noise laws
@pytest.mark.parametrize("algo, sens", [("privlr", fm.delta_f), ("pflr", fm.delta_f_tilde)])
def test_laplace_noise_variance(algo, sens):
    """b_bar - b over many draws has variance 2 (Delta/eps)^2 per coefficient, and the ledger holds one entry."""
    t = toy(n=50, d=3)
    plugin = registry.make(algo)
    exact = fm.lr_polynomial(t.X, t.y) if algo == "privlr" else fm.fair_polynomial(t.X, t.y, t.s)
    rng, draws = np.random.default_rng(5), []
    for _ in range(4000):
        ledger = PrivacyLedger(Budget(2.0))
        poly, _ = plugin.release(t.X, t, Budget(2.0), ledger, rng)
        draws.append(poly.pack() - exact.pack())
    assert len(ledger.entries) == 1 and ledger.entries[0].sensitivity == sens(3)
    var = np.var(np.array(draws), axis=0)
    target = 2 * (sens(3) / 2.0) ** 2
    assert np.all(np.abs(var / target - 1) < 0.2) and abs(var.mean() / target - 1) < 0.03


def test_pflr_star_with_infinite_eps_g_adds_exactly_mu():
    t = toy()
    poly, _, ledger = release("pflr_star", t, Budget(2e12), eps_f=1e12)
    mu = t.X.T @ (t.s - t.s.mean())
    np.testing.assert_allclose(poly.b - fm.lr_polynomial(t.X, t.y).b, mu, rtol=1e-6, atol=1e-6)
    assert [e.eps for e in ledger.entries] == [1e12, 1e12]
    assert [e.sensitivity for e in ledger.entries] == [fm.delta_g(t.d), fm.delta_f(t.d)]
    poly, _, _ = release("pflr_star", t, Budget(math.inf))
    np.testing.assert_allclose(poly.b - fm.lr_polynomial(t.X, t.y).b, mu, rtol=1e-12)


def test_pflr_and_pflr_star_share_the_noise_free_objective():
    """Thesis §8.3.2: the fairness term of Eq. 8.2 shifts the Phi_1 coefficients by c = sum_i (s_i - s_bar) x_i,
    and PFLR*'s noise mean has "the equivalent effect". With `fair_coef: signed` noise-free PFLR and PFLR*
    minimise the same polynomial; alpha scales the shift in both. The default is Algorithm 5's element-wise form."""
    t = toy()
    poly = fm.lr_polynomial(t.X, t.y)
    for alpha in (1.0, 0.3):
        pflr, _ = fit("pflr", t, eps=math.inf, alpha=alpha, fair_coef="signed")
        star, _ = fit("pflr_star", t, eps=math.inf, alpha=alpha)
        np.testing.assert_allclose(pflr.w, star.w, rtol=1e-8, atol=1e-10)
        ref = fm.minimise(fm.Polynomial(poly.b + alpha * fm.covariance_vector(t.X, t.s), poly.M)).w
        np.testing.assert_allclose(pflr.w, ref, rtol=1e-8, atol=1e-10)
    literal, _ = fit("pflr", t, eps=math.inf)
    ref = fm.minimise(fm.Polynomial(poly.b + t.X.T @ np.abs(t.s - t.s.mean()), poly.M)).w
    np.testing.assert_allclose(literal.w, ref, rtol=1e-8, atol=1e-10)


def test_pflr_star_spends_eps_f_plus_eps_g():
    _, ledger = fit("pflr_star", toy(), eps=1.0, eps_f_ratio=0.3)
    assert [e.eps for e in ledger.entries] == pytest.approx([0.7, 0.3])
    assert ledger.spent()[0] == pytest.approx(1.0)


def test_pflr_star_eps_f_beyond_eps_is_refused():
    with pytest.raises(ConfigError, match="algo.eps_f=2 must be < eps=1"):
        fit("pflr_star", toy(), eps=1.0, eps_f=2.0)


# ------------------------------------------------------------------------------------------ fairness
def test_fairlr_constraint_holds_on_training_data():
    t = toy(n=2000, d=8)
    plugin, _ = fit("fairlr", t)
    c = fm.covariance_vector(t.X, t.s)
    assert abs(c @ plugin.w) <= 1e-6 * np.linalg.norm(c) * np.linalg.norm(plugin.w)
    plain, _ = fit("fairlr", t, mode="constraint", tau=abs(c @ plugin.w) + 1e9)  # inactive constraint
    assert abs(c @ plain.w) > 1e-3 * np.linalg.norm(c) * np.linalg.norm(plain.w)


def test_fairlr_taylor_objective_solves_the_kkt_system():
    """objective=taylor: argmin b^T w + w^T M w s.t. c^T w = 0 equals the KKT solve [2M c; c^T 0] (full rank)."""
    t = toy(n=2000, d=8)
    plugin, _ = fit("fairlr", t, objective="taylor")
    poly, c = fm.lr_polynomial(t.X, t.y), fm.covariance_vector(t.X, t.s)
    kkt = np.block([[2 * poly.M, c[:, None]], [c[None, :], np.zeros((1, 1))]])
    ref = np.linalg.solve(kkt, np.concatenate([-poly.b, [0.0]]))[:-1]
    np.testing.assert_allclose(plugin.w, ref, rtol=1e-6, atol=1e-8)
    assert abs(c @ plugin.w) <= 1e-6 * np.linalg.norm(c) * np.linalg.norm(plugin.w)


def test_pflr_star_shift_lowers_the_privileged_group_scores():
    """A4: noise-free, the shift mu lowers the signed gap P(y_hat=1|s=1) - P(y_hat=1|s=0) of the Taylor LR."""
    t = toy(n=3000, d=6)
    base = fm.minimise(fm.lr_polynomial(t.X, t.y)).w
    poly = fm.lr_polynomial(t.X, t.y)
    shifted = fm.minimise(fm.Polynomial(poly.b + fm.covariance_vector(t.X, t.s), poly.M)).w

    def gap(w):
        return metrics.classification(t.y, (t.X @ w > 0).astype(int), t.s)["risk_difference"]

    assert gap(base) > 0 and gap(shifted) < gap(base)


# ------------------------------------------------------------------------------------------ reproduction
@needs_data("adult")
def test_table8_1_lr_row_against_the_thesis_and_an_independent_lr():
    """Thesis Table 8.1, Adult, LR: accuracy 0.8380 ± 0.0023, RD 0.1577 ± 0.0064 (10 runs). The noise-free Taylor
    LR is the row's reading (pflr.md §10); on 3 of the experiment's splits it must match within the project's
    verdict rule, max(floor 0.01, 2 sqrt(std_pub^2 + std_ours^2) / sqrt(runs)) (reproduce.py, floors of
    xu2021_table8_1.yaml). The exact `lr` is checked against scikit-learn on the same splits instead: the
    two implementations must give the same test accuracy to 0.002."""
    from sklearn.linear_model import LogisticRegression

    taylor, exact, sk = [], [], []
    for seed in range(3):
        train, test = table("adult", seed)
        plugin, _ = fit("lr_taylor", train)
        taylor.append(metrics.classification(test.y, plugin.predict(test.X), test.s))
        lr, _ = fit("lr", train)
        exact.append((lr.predict(test.X) == test.y).mean())
        ref = LogisticRegression(C=1e6, solver="newton-cholesky").fit(train.X, train.y)
        sk.append((ref.predict(test.X) == test.y).mean())
    for metric, published, std_pub in (("accuracy", 0.8380, 0.0023), ("risk_difference_abs", 0.1577, 0.0064)):
        ours = np.array([m[metric] for m in taylor])
        tolerance = max(0.01, 2 * math.sqrt(std_pub**2 + ours.std(ddof=1) ** 2) / math.sqrt(len(ours)))
        assert abs(ours.mean() - published) <= tolerance, (metric, ours.mean(), published, tolerance)
    np.testing.assert_allclose(exact, sk, atol=0.002)
