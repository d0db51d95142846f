"""FFPDG's private GAN generators (ffpdg.md §5): DP-WGAN's per-step noise (statistical) and its eps against the
RDP accountant's reference value; PATE-GAN's vote noise scale (statistical) and moments accountant pinned to the
spec's formula; generated tables in the encoding; the claimed guarantee; bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privfair_cli import registry
from privfair_cli.algorithms import dpwgan, gan, pategan
from privfair_cli.algorithms.dpsgd_trainer import PerExampleGradients
from privfair_cli.config import load_card
from privfair_cli.errors import ConfigError
from privfair_cli.privacy import accountants, pate
from privfair_cli.privacy.ledger import Budget, PrivacyLedger
from tests.conftest import require_data

ORDERS = accountants.DEFAULT_RDP_ORDERS


def toy_table(n: int, seed: int = 0) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.4).astype(int)
    a = rng.integers(0, 3, n)
    y = (rng.random(n) < np.where(s == 1, 0.7, 0.3)).astype(int)
    return np.column_stack([s, a, y]), [2, 3, 2]


# ---------------------------------------------------------------------------------------------- gan.py helpers
def test_onehot_and_decode_round_trip():
    X, domain = toy_table(50)
    H = gan.onehot_codes(X, domain)
    assert H.shape == (50, 7) and torch.all(H.sum(1) == 3)
    np.testing.assert_array_equal(gan.decode_blocks(H, domain).numpy(), X)
    P = gan.block_softmax(torch.randn(4, 7), domain)
    for part in torch.split(P, domain, -1):
        torch.testing.assert_close(part.sum(-1), torch.ones(4))


# ---------------------------------------------------------------------------------------------- DP-WGAN
def test_dpwgan_noise_std_is_sigma_times_clip_per_step():
    torch.manual_seed(0)
    D = dpwgan.critic_network(7, 16, 2)
    pe = PerExampleGradients(D)
    x = gan.onehot_codes(*toy_table(64))
    sigma, clip = 2.0, 0.05  # a small clip: every example is clipped
    gen = torch.Generator().manual_seed(1)
    draws = []
    for _ in range(40):
        clipped, noisy = dpwgan.noisy_real_gradient(pe, x, clip, sigma, gen)
        draws.append(torch.cat([(b - a).flatten() for a, b in zip(clipped, noisy, strict=True)]))
    noise = torch.stack(draws).double()
    n = noise.numel()
    assert noise.std().item() == pytest.approx(sigma * clip, rel=4 / math.sqrt(n) + 0.01)
    assert abs(noise.mean().item()) < 4 * sigma * clip / math.sqrt(n)
    # the clipped sum of one example has norm <= clip
    single, _ = dpwgan.noisy_real_gradient(pe, x[:1], clip, sigma, gen)
    assert torch.sqrt(sum((g**2).sum() for g in single)).item() <= clip * (1 + 1e-5)


def _reference_eps(q: float, sigma: float, steps: int, delta: float) -> float:
    """dp-accounting's RdpAccountant composed `steps` times, converted by the classic formula
    eps = min_a rdp(a) + log(1/delta) / (a - 1), written out here."""
    from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent
    from dp_accounting.rdp import RdpAccountant

    acc = RdpAccountant(list(ORDERS))
    acc.compose(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps)
    orders = np.asarray(ORDERS, dtype=float)
    return float(np.min(np.asarray(acc.rdp) + math.log(1 / delta) / (orders - 1)))


def test_dpwgan_eps_equals_the_accountant_reference():
    s = dpwgan.Settings(batch=64)
    T, q, eps_T = dpwgan.plan_steps(4000, 1.0, 1e-5, s, ORDERS, "classic")
    assert q == pytest.approx(64 / 4000)
    assert eps_T == pytest.approx(_reference_eps(q, 2.0, T, 1e-5), rel=1e-9)
    assert eps_T <= 1.0 < _reference_eps(q, 2.0, T + 1, 1e-5)  # the most steps within eps
    # a cap below the eps limit spends less
    T2, _, eps2 = dpwgan.plan_steps(4000, 1.0, 1e-5, dpwgan.Settings(max_steps=100), ORDERS, "classic")
    assert T2 == 100 and eps2 == pytest.approx(_reference_eps(q, 2.0, 100, 1e-5), rel=1e-9)


def test_dpwgan_pld_plan_is_dp_accountings_pld_and_allows_more_steps():
    from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent
    from dp_accounting.pld import PLDAccountant

    T, q, eps_T = dpwgan.plan_steps(4000, 1.0, 1e-5, dpwgan.Settings(batch=64, accounting="pld"), ORDERS, "classic")

    def reference(steps):  # dp-accounting's own PLD accountant, built from its public API
        acc = PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(PoissonSampledDpEvent(q, GaussianDpEvent(2.0)), steps)
        return acc.get_epsilon(1e-5)

    assert eps_T == pytest.approx(reference(T), rel=1e-3)
    assert eps_T <= 1.0 < reference(T + 25)  # (close to) the most steps within eps
    T_rdp, _, _ = dpwgan.plan_steps(4000, 1.0, 1e-5, dpwgan.Settings(batch=64), ORDERS, "classic")
    assert T > 1.3 * T_rdp  # the tighter accountant is why it is the default
    with pytest.raises(ConfigError, match="dpwgan_accounting"):
        dpwgan.plan_steps(4000, 1.0, 1e-5, dpwgan.Settings(accounting="moments"), ORDERS, "classic")


def test_dpwgan_pld_charges_one_entry_that_the_audit_recomposes():
    from privfair_cli.tools.audit.whitebox import independent_eps

    X, domain = toy_table(600)
    s = dpwgan.Settings(hidden=16, noise_dim=8, max_steps=30, accounting="pld")
    ledger = PrivacyLedger(Budget(5.0, 1e-5), accountant="basic")
    dpwgan.generate(X, domain, 50, 5.0, 1e-5, s, np.random.default_rng(0), ledger)
    (entry,) = ledger.entries
    assert entry.extra == {"accountant": "pld", "sigma": 2.0, "q": pytest.approx(64 / 600), "steps": 30}
    ind = independent_eps(ledger)
    assert "sum" not in ind and ind["pld"] == pytest.approx(entry.eps, rel=1e-3) and ind["rdp"] > entry.eps
    with pytest.raises(ConfigError, match="dpwgan_accounting=rdp"):
        dpwgan.generate(X, domain, 50, 5.0, 1e-5, s, np.random.default_rng(0),
                        PrivacyLedger(Budget(5.0, 1e-5), accountant="rdp"))


@pytest.mark.parametrize("accountant", ["basic", "rdp"])
def test_dpwgan_charges_the_ledger_and_respects_the_encoding(accountant):
    X, domain = toy_table(600)
    ledger = PrivacyLedger(Budget(5.0, 1e-5), accountant=accountant)
    s = dpwgan.Settings(hidden=16, noise_dim=8, max_steps=30)
    out = dpwgan.generate(X, domain, 250, 5.0, 1e-5, s, np.random.default_rng(0), ledger)
    assert out.shape == (250, 3) and out.dtype == np.int64
    assert all((out[:, j] >= 0).all() and (out[:, j] < c).all() for j, c in enumerate(domain))
    eps, delta = ledger.spent()
    assert eps == pytest.approx(_reference_eps(64 / 600, 2.0, 30, 1e-5), rel=1e-6)
    assert delta == 1e-5


def test_dpwgan_needs_delta():
    X, domain = toy_table(100)
    with pytest.raises(ConfigError, match="delta > 0"):
        dpwgan.generate(X, domain, 10, 1.0, 0.0, dpwgan.Settings(), np.random.default_rng(0),
                        PrivacyLedger(Budget(1.0, 0.0)))


# ---------------------------------------------------------------------------------------------- PATE-GAN
@pytest.mark.parametrize("lam,n1", [(1.0, 4), (0.5, 3), (2.0, 5)])
def test_pategan_vote_noise_scale(lam, n1):
    """P(noisy label = 1) for n_1 of k votes: n_1 + L_1 > n_0 + L_0 with L ~ Lap(1/lam) iid; the difference of two
    Laplace(b) exceeds d >= 0 with probability exp(-d/b) (1 + d/(2b)) / 2."""
    k, m = 10, 200_000
    votes = pategan.noisy_votes(np.full(m, n1), k, lam, np.random.default_rng(0))
    d, b = (k - n1) - n1, 1 / lam
    expected = 0.5 * math.exp(-d / b) * (1 + d / (2 * b))
    assert votes.mean() == pytest.approx(expected, abs=5 * math.sqrt(expected * (1 - expected) / m))


def _moments_by_hand(gap: int, lam: float, L: int) -> list[float]:
    q = (2 + lam * gap) / (4 * math.exp(lam * gap))
    out = []
    for l in range(1, L + 1):  # noqa: E741
        indep = 2 * lam**2 * l * (l + 1)
        denom = 1 - math.exp(2 * lam) * q
        dep = math.log((1 - q) * ((1 - q) / denom) ** l + q * math.exp(2 * lam * l)) if denom > 0 else math.inf
        out.append(min(indep, dep))
    return out


@pytest.mark.parametrize("lam", [1.0, 0.1, 0.01])
def test_pategan_moments_accountant_pinned(lam):
    gaps = np.array([10, 10, 6, 2, 0])
    got = pate.moments_update(gaps, lam, 20)
    want = np.sum([_moments_by_hand(int(g), lam, 20) for g in gaps], axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    indep = pate.moments_update(gaps, lam, 20, "data_independent")
    np.testing.assert_allclose(indep, 5 * 2 * lam**2 * np.arange(1, 21) * np.arange(2, 22))
    alpha = got
    assert pate.epsilon(alpha, 1e-5) == pytest.approx(min((alpha[i] + math.log(1e5)) / (i + 1)
                                                             for i in range(20)))


def test_pategan_spec_settings_afford_no_label_at_eps_1():
    """lambda = 1, 10 unanimous teachers: one label already costs eps_hat > 1 at delta = 1e-5."""
    assert pate.epsilon(pate.moments_update(np.array([10]), 1.0, 100), 1e-5) > 1
    X, domain = toy_table(400)
    ledger = PrivacyLedger(Budget(1.0, 1e-5))
    out, labels = pategan.generate(X, domain, 100, 1.0, 1e-5, pategan.Settings(hidden=16, noise_dim=8),
                                   np.random.default_rng(0), ledger)
    assert labels == 0 and ledger.spent() == (0.0, 0.0) and out.shape == (100, 3)


@pytest.mark.parametrize("accountant", ["basic", "rdp"])
def test_pategan_charges_the_accountants_eps_and_respects_the_encoding(accountant):
    X, domain = toy_table(800)
    ledger = PrivacyLedger(Budget(1.0, 1e-5), accountant=accountant)
    s = pategan.Settings(hidden=16, noise_dim=8, lam=0.003, max_rounds=3)
    out, labels = pategan.generate(X, domain, 300, 1.0, 1e-5, s, np.random.default_rng(0), ledger)
    assert labels == 3 * 5 * 64
    assert all((out[:, j] >= 0).all() and (out[:, j] < c).all() for j, c in enumerate(domain))
    eps, _ = ledger.spent()
    assert 0 < eps <= 1.0
    if accountant == "basic":  # data-independent at this lambda (every min picks 2 lam^2 l (l + 1))
        alpha = pate.moments_update(np.zeros(labels), 0.003, 100, "data_independent")
        assert eps == pytest.approx(pate.epsilon(alpha, 1e-5), rel=1e-9)


def test_rdp_curve_from_moments():
    alpha = np.array([0.1, 0.4, 0.9])
    np.testing.assert_allclose(pate.rdp_curve(alpha, [2, 3, 3.5, 4, 5]), [0.1, 0.2, 0.3, 0.3, math.inf])


# ---------------------------------------------------------------------------------------------- plugin
@pytest.mark.parametrize("over,claim", [
    ({"generator": "dpwgan", "preprocessor": "none"}, "eps-DP"),
    ({"generator": "dpwgan", "order": "fair_last"}, "eps-DP"),
    ({"generator": "dpwgan"}, "heuristic"),
    ({"generator": "pategan", "preprocessor": "none"}, "heuristic"),
    ({"generator": "pategan", "preprocessor": "none", "pategan_bound": "data_independent"}, "eps-DP"),
])
def test_gan_claims(over, claim):
    assert registry.make("ffpdg", **over).claims() == claim


def test_dpwgan_run_is_eps_delta_dp(tmp_path):
    from privfair_cli import compose, runner

    require_data(load_card("compas_ffpdg")["subdir"])
    cfg = compose.compose(["algo=ffpdg", "data=compas_ffpdg", "algo.classifiers=[lr]", "algo.preprocessor=none",
                           "algo.generator=dpwgan", "algo.dpwgan_max_steps=20", "algo.gan_hidden=16", "delta=1e-5"])
    record = runner.run(cfg, tmp_path / "run", log=lambda *_: None)
    assert record["guarantee"] == "(eps,delta)-DP"
    assert 0 < record["privacy"]["eps_spent"] < 1 and record["privacy"]["delta_spent"] == 1e-5
    assert [e["mechanism"] for e in record["privacy"]["ledger"]] == ["subsampled_gaussian"]


def test_pipeline_cell_refuses_runs_failing_a_premise():
    import pandas as pd

    from privfair_cli.tools import reproduce

    runs = pd.DataFrame({"cfg.algo.preprocessor": ["none"] * 4, "cfg.algo.generator": ["pategan"] * 2 + ["dpwgan"] * 2,
                         "aucroc": [0.5, 0.6, 0.7, 0.8], "pategan_labels": [0.0, 64.0, np.nan, np.nan]})
    cell = reproduce.pipeline(lambda _: runs, "none+pategan", "aucroc", premises=("pategan_labels",))
    assert cell.n == 1 and cell.mean == 0.6
    assert reproduce.pipeline(lambda _: runs, "none+dpwgan", "aucroc", premises=("pategan_labels",)).n == 2
    assert reproduce.pipeline(lambda _: runs.iloc[:1], "none+pategan", "aucroc", premises=("pategan_labels",)).n == 0
