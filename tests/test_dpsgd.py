"""DP-SGD family (dpsgd_f.md): accountant, per-example norms, clipping rules, noise scale, datasets, runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import gammaln, logsumexp

from privfair_cli.algorithms import dpsgd
from privfair_cli.datasets import Table
from privfair_cli.privacy import Budget, PrivacyLedger

ROOT = Path(__file__).resolve().parents[1]
DELTA = 1e-6
# (n_train, sigma, epochs, printed eps): dpsgd_f.md §2 table.
THESIS_SETTINGS = [(60000, 0.8, 60, 6.23), (54649, 0.8, 60, 6.55), (36177, 1.0, 20, 3.1),
                   (22400, 1.0, 20, 3.99), (48336, 1.0, 20, 2.66), (32000, 1.0, 20, 3.29)]


def naive_per_example_norms(model, x, loss_fn) -> torch.Tensor:
    """Independent reference for the fast path: one backward pass per example."""
    norms = []
    for i in range(len(x)):
        grads = torch.autograd.grad(loss_fn(model(x[i:i + 1]), i).sum(), list(model.parameters()))
        norms.append(torch.sqrt(sum(g.pow(2).sum() for g in grads)))
    return torch.stack(norms)


def spec_rdp(q, sigma, orders):
    """Independent implementation of spec §2: binomial expansion at integer orders, in log space."""
    out = []
    for a in orders:
        k = np.arange(a + 1)
        log_terms = (gammaln(a + 1) - gammaln(k + 1) - gammaln(a - k + 1) + (a - k) * np.log1p(-q)
                     + k * np.log(q) + (k * k - k) / (2 * sigma**2))
        out.append(logsumexp(log_terms) / (a - 1))
    return np.array(out)


# ----------------------------------------------------------------------------------------- accounting
@pytest.mark.parametrize("n, sigma, epochs, printed", THESIS_SETTINGS)
def test_accountant_reproduces_thesis_eps(n, sigma, epochs, printed):
    q, steps = 256 / n, int(epochs * n // 256)
    assert round(dpsgd.dpsgd_epsilon(q, sigma, steps, DELTA), 2) == pytest.approx(printed)
    orders = list(range(2, 33))
    ours = dpsgd.sampled_gaussian_rdp(q, sigma, 1, orders)
    np.testing.assert_allclose(ours, spec_rdp(q, sigma, orders), rtol=1e-9)


def test_accountant_matches_opacus_rdp():
    rdp = pytest.importorskip("opacus.accountants.analysis.rdp")
    q, sigma, steps, orders = 256 / 36177, 1.0, 2826, list(range(2, 65))
    np.testing.assert_allclose(dpsgd.sampled_gaussian_rdp(q, sigma, steps, orders),
                               rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders), rtol=1e-6)


def test_exact_budget_matching_iterations():
    """Spec §2: strict matching needs 51 / 46 (MNIST bal./unbal.), 15 / 9 (Adult orig./bal.), 20 / 13 (Dutch
    orig./unbal.) removed iterations."""
    want = [51, 46, 15, 9, 20, 13]
    got = [dpsgd.iterations_to_match(256 / n, s, 10 * s, int(e * n // 256), DELTA)
           for n, s, e, _ in THESIS_SETTINGS]
    assert got == want


def test_calibrated_sigma_fits_budget():
    q, steps = 256 / 36177, 2826
    sigma = dpsgd.calibrate_sigma(q, steps, 3.1, DELTA)
    assert dpsgd.dpsgd_epsilon(q, sigma, steps, DELTA) <= 3.1 < dpsgd.dpsgd_epsilon(q, sigma * 0.99, steps, DELTA)
    assert sigma == pytest.approx(1.0, rel=2e-3)


# ----------------------------------------------------------------------------------------- per-example norms
def small_cnn():
    return torch.nn.Sequential(
        torch.nn.Unflatten(1, (1, 10, 10)), torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 6, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(96, 7),
        torch.nn.ReLU(), torch.nn.Linear(7, 3)).double()


@pytest.mark.parametrize("l2", [0.0, 0.3])
def test_fast_norms_and_clipped_sum_equal_naive_loop(l2):
    torch.manual_seed(0)
    model, x, y = small_cnn(), torch.randn(9, 100, dtype=torch.float64), torch.randint(0, 3, (9,))
    weights = [p for p in model.parameters() if p.dim() > 1]

    def loss(out, idx=None):
        lab = y if idx is None else y[idx:idx + 1]
        reg = 0.5 * l2 * sum(w.pow(2).sum() for w in weights)
        return torch.nn.functional.cross_entropy(out, lab, reduction="none") + reg

    engine = dpsgd.PerExampleGradients(model, l2_in_loss=l2)
    # the engine adds the L2 term itself (data loss only), the naive loop differentiates it
    _, nu = engine.compute(x, lambda out: torch.nn.functional.cross_entropy(out, y, reduction="none"))
    naive = naive_per_example_norms(model, x, loss)
    np.testing.assert_allclose(nu.numpy(), naive.detach().numpy(), rtol=1e-5, atol=1e-7)
    c = torch.rand(9, dtype=torch.float64)
    want = [torch.zeros_like(p) for p in model.parameters()]
    for i in range(9):
        grads = torch.autograd.grad(loss(model(x[i:i + 1]), i).sum(), list(model.parameters()))
        for w, g in zip(want, grads, strict=True):
            w += c[i] * g
    for got, w in zip(engine.clipped_sum(c), want, strict=True):
        np.testing.assert_allclose(got.numpy(), w.numpy(), rtol=1e-6, atol=1e-9)


def test_mnist_cnn_has_431080_parameters():
    assert sum(p.numel() for p in dpsgd.build_model("cnn", 784, 10).parameters()) == 431_080


# ----------------------------------------------------------------------------------------- clipping rules
@pytest.mark.parametrize("algorithm", ["dpsgd", "dpsgd_f", "dpsgd_naive"])
def test_clipping_never_exceeds_group_bound(algorithm):
    rng = np.random.default_rng(0)
    nu = torch.as_tensor(rng.lognormal(0, 1.5, 4000))
    k = torch.as_tensor(rng.integers(0, 10, 4000))
    cfg = dpsgd.TrainConfig(algorithm=algorithm, batch_size=256, C=1.0, sigma1=8.0, groups=10)
    for _ in range(20):
        c, C, Ck = dpsgd.clip_factors(cfg, nu, k, rng)
        clipped = (c * nu).numpy()
        if algorithm == "dpsgd_f":
            assert np.all(Ck >= cfg.C - 1e-12)
            assert np.all(clipped <= Ck[k.numpy()] * (1 + 1e-12))
            assert C == pytest.approx(Ck.max())
        elif algorithm == "dpsgd":
            assert np.all(clipped <= cfg.C * (1 + 1e-12))
        else:  # Naive: example i contributes at most theta^k C0 <= C
            assert np.all(clipped <= C * (1 + 1e-12))


def census_like(n=3000, d=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    s = rng.integers(0, 2, n)
    y = (X[:, 0] + 0.3 * s + 0.2 * rng.standard_normal(n) > 0.8).astype(np.int64)
    return X, y, s


def train_logistic(algorithm, C, X, y, k, seed=0, steps=40, **kw):
    model = dpsgd.build_model("logistic", X.shape[1], 2)
    cfg = dpsgd.TrainConfig(algorithm=algorithm, steps=steps, batch_size=64, lr=0.5, C=C, sigma=1.0,
                            groups=2, epochs=1, **kw)
    dpsgd.train(model, "logistic", torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y),
                torch.as_tensor(k), cfg, np.random.default_rng(seed))
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_dpsgd_f_equals_dpsgd_at_twice_the_bound():
    """Spec §8: count noise off, equal clipped fractions (every example clipped), fixed-size batches:
    all C^k = 2 C0, so DPSGD-F is DPSGD with C = 2 C0 (same random stream)."""
    X, y, s = census_like()
    X = X * 50  # gradient norms far above C0
    f = train_logistic("dpsgd_f", 1e-3, X, y, s, sigma1=0.0, batch_sampling="fixed_uniform")
    d = train_logistic("dpsgd", 2e-3, X, y, s, batch_sampling="fixed_uniform")
    torch.testing.assert_close(f, d, rtol=1e-5, atol=1e-7)
    other = train_logistic("dpsgd", 1e-3, X, y, s, batch_sampling="fixed_uniform")
    assert not torch.allclose(f, other)


def test_group_mean_gradient_norm_equals_autograd_per_group():
    """Table 9.3 diagnostic: with r = 0 (fixed weights) and one shuffled epoch, the logged norm of each group's
    mean gradient equals ||grad of the group's mean loss|| from plain autograd, and the mean per-example norm
    is at least as large (triangle inequality)."""
    X, y, s = census_like(n=640, d=6)
    model = dpsgd.build_model("logistic", X.shape[1], 2)
    torch.nn.init.normal_(model[0].weight, generator=torch.Generator().manual_seed(0))
    cfg = dpsgd.TrainConfig(algorithm="sgd", steps=10, batch_size=64, lr=0.0, sigma=0.0, groups=2, epochs=1,
                            batch_sampling="shuffle", group_mean_grad=True)
    Xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
    log = dpsgd.train(model, "logistic", Xt, yt, torch.as_tensor(s), cfg, np.random.default_rng(0))
    for k in (0, 1):
        model.zero_grad()
        rows = torch.as_tensor(s == k)
        dpsgd.per_example_loss("logistic", model(Xt[rows]), yt[rows]).mean().backward()
        expect = torch.sqrt(sum(p.grad.pow(2).sum() for p in model.parameters())).item()
        assert log.mean_grad_norm[0, k] == pytest.approx(expect, rel=1e-5)
        assert log.norm[0, k] / log.count[0, k] >= expect


def test_noise_std_on_averaged_gradient_is_sigma_C_over_b():
    """One step with and without noise from the same random state: the parameter difference is
    lr * N(0, sigma^2 C^2) / b per coordinate."""
    rng = np.random.default_rng(1)
    n, d, b, C, sigma, lr = 500, 20000, 50, 0.7, 1.3, 1.0
    X = torch.as_tensor(rng.random((n, d)), dtype=torch.float32)
    y, k = torch.as_tensor(rng.integers(0, 2, n)), torch.zeros(n, dtype=torch.int64)
    out = []
    for sig in (sigma, 0.0):
        model = dpsgd.build_model("logistic", d, 2)
        cfg = dpsgd.TrainConfig(algorithm="dpsgd", steps=1, batch_size=b, lr=lr, C=C, sigma=sig, groups=1)
        dpsgd.train(model, "logistic", X, y, k, cfg, np.random.default_rng(5))
        out.append(torch.cat([p.detach().flatten() for p in model.parameters()]).double().numpy())
    noise = out[0] - out[1]
    want = lr * sigma * C / b
    se = want / np.sqrt(2 * len(noise))  # standard error of the sample std
    assert abs(noise.std() - want) < 5 * se
    assert abs(noise.mean()) < 5 * want / np.sqrt(len(noise))


def test_cpu_runs_are_bit_for_bit_repeatable():
    X, y, s = census_like()
    a = train_logistic("dpsgd_f", 0.5, X, y, s, seed=3)
    b = train_logistic("dpsgd_f", 0.5, X, y, s, seed=3)
    assert torch.equal(a, b)


# ----------------------------------------------------------------------------------------- plugins
def table(n=2000, seed=0, name="toy"):
    X, y, s = census_like(n, seed=seed)
    return Table(name, X, y, s, [f"x{i}" for i in range(X.shape[1])])


def fit(name, data, seed=0, eps=10.0, **params):
    cls = dpsgd.XuSGD.__subclasses__()
    plugin = next(c for c in cls if c.name == name)(**({"epochs": 2} | params), mechanism={})
    ledger = PrivacyLedger(Budget(eps, DELTA), accountant=plugin.accountant)
    plugin.fit(data, Budget(eps, DELTA), ledger, np.random.default_rng(seed), "cpu")
    return plugin, ledger


def test_reference_equals_the_sgd_run_of_the_same_seed():
    data = table()
    sgd, _ = fit("sgd", data, seed=4)
    dp, _ = fit("dpsgd", data, seed=4)
    for p, q in zip(sgd.model.parameters(), dp.reference.parameters(), strict=True):
        assert torch.equal(p, q)
    m = dp.evaluate(data, table(500, seed=9), np.random.default_rng(0))
    assert m["accuracy_diff_vs_sgd_s1"] == pytest.approx(m["accuracy_s1"] - m["sgd_accuracy_s1"])
    assert m["utility_loss_gap"] == pytest.approx(abs(m["accuracy_diff_vs_sgd_s1"] - m["accuracy_diff_vs_sgd_s0"]))


def test_dpsgd_f_ledger_includes_the_counts():
    data = table()
    dp, led = fit("dpsgd", data, match_budget="none")
    f, led_f = fit("dpsgd_f", data, match_budget="none")
    q, T = 256 / len(data), dp.info["steps"]
    assert led.spent()[0] == pytest.approx(dpsgd.dpsgd_epsilon(q, 1.0, T, DELTA))
    assert led_f.spent()[0] == pytest.approx(dpsgd.dpsgd_epsilon(q, 1.0, T, DELTA, sigma1=10.0))
    assert led_f.spent()[0] > led.spent()[0]
    assert [e.extra["sigma"] for e in led_f.entries] == [1.0, 10.0]
    exact, led_x = fit("dpsgd_f", data, match_budget="exact")
    assert led_x.spent()[0] <= led.spent()[0] and exact.info["steps_removed"] > 0


def test_budget_is_enforced_and_calibration_fits_it():
    from privfair_cli.errors import BudgetExceeded

    data = table()
    with pytest.raises(BudgetExceeded):
        fit("dpsgd", data, eps=0.5)
    plugin, ledger = fit("dpsgd_f", data, eps=0.5, sigma="calibrate", reference=False)
    assert ledger.spent()[0] <= 0.5 and plugin.info["sigma"] > 1


# ----------------------------------------------------------------------------------------- datasets and CLI
needs_data = pytest.mark.skipif(not os.environ.get("PRIVFAIR_DATA_DIR"), reason="PRIVFAIR_DATA_DIR is not set")


def load_card(name, seed=0):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from privfair_cli import datasets

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base=None):
        cfg = compose(config_name="config", overrides=[f"data={name}"])
    card = OmegaConf.to_container(cfg.data, resolve=True)
    folder = Path(os.environ["PRIVFAIR_DATA_DIR"]) / card["subdir"]
    if not folder.is_dir():
        pytest.skip(f"dataset folder {folder} is absent")
    return datasets.load(card, np.random.default_rng(seed))


@needs_data
def test_census_variants_have_the_thesis_group_sizes():
    a = load_card("adult_balanced")
    assert np.bincount(a.s).tolist() == [14000, 14000]
    d = load_card("dutch_unbalanced")
    assert np.bincount(d.s).tolist() == [10000, 30000]
    assert not np.array_equal(load_card("adult_balanced", seed=1).X, a.X)


@needs_data
def test_mnist_unbalanced_keeps_500_eights_and_the_test_set():
    t = load_card("mnist_unbalanced")
    train = ~t.meta["row_is_test"]
    assert train.sum() == 54649 and np.sum(t.y[train] == 8) == 500 and np.sum(t.y[train] == 2) == 5958
    assert (~train).sum() == 10000 and t.X.dtype == np.float32 and t.X.max() <= 1


@needs_data
def test_cli_run_writes_privacy_block_and_curves(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "privfair_cli", "run", "algo=dpsgd_f", "data=adult", "data.n=3000", "eps=10",
           "delta=1e-6", "algo.epochs=2", f"hydra.run.dir={out}"]
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
    record = json.loads((out / "metrics.json").read_text())
    extras = [e["extra"] for e in record["privacy"]["ledger"]]
    assert {"sigma", "q", "steps"} <= set(extras[0]) and len(extras) == 2
    assert record["metrics"]["eps_accountant"] == pytest.approx(record["privacy"]["eps_spent"])
    for key in ("accuracy_s0", "accuracy_diff_vs_sgd_s1", "avg_grad_norm_s0", "utility_loss_gap"):
        assert key in record["metrics"]
    assert (out / "artifacts" / "curves.csv").is_file() and (out / "artifacts" / "curves.png").is_file()

