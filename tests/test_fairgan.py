"""FairGAN family (fairgan.md): the shared GAN trainer, the generators, the baselines and the §7 metrics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from privfair_cli import datasets, downstream, evaluate, metrics, registry
from privfair_cli.algorithms import adv_debias, fairgan, gan
from privfair_cli.threads import torch_threads
from tests.conftest import fit, needs_data, table

# small networks and a short schedule: what is tested is the machinery, not Adult's numbers
SMALL = {"profile": "full", "pretrain_epochs": 3, "phase1_epochs": 2, "phase2_epochs": 2, "batch_size": 100,
         "noise_dim": 32, "d_hidden": [64, 32]}


def s_dependent(n=2000, seed=0) -> datasets.Table:
    """y depends on s (P(y=1|s=1) = 0.75, P(y=1|s=0) = 0.2); attribute a copies s 85% of the time, b copies y
    80% of the time, c is noise. Discrete view a, b, c, sex, income."""
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.5).astype(int)
    y = (rng.random(n) < np.where(s == 1, 0.75, 0.2)).astype(int)
    a = np.where(rng.random(n) < 0.85, s, rng.integers(3, size=n))
    b = np.where(rng.random(n) < 0.8, y, rng.integers(3, size=n))
    c = rng.integers(2, size=n)
    frame = pd.DataFrame({"a": a, "b": b, "c": c, "sex": s, "income": y})
    domain = {"a": 3, "b": 3, "c": 2, "sex": 2, "income": 2}
    X = np.zeros((n, 8))
    X[np.arange(n), a] = X[np.arange(n), 3 + b] = X[np.arange(n), 6 + c] = 1
    return datasets.Table("s_dependent", X, y, s, [f"x{i}" for i in range(8)], frame, domain, {},
                          {"sensitive_column": "sex", "label_column": "income"})


def test_pmf_distance_agrees_with_counting():
    rng = np.random.default_rng(1)
    a, b = rng.integers(2, size=(300, 4)), rng.integers(2, size=(200, 4))
    pa = pd.Series(map(tuple, a)).value_counts(normalize=True)
    pb = pd.Series(map(tuple, b)).value_counts(normalize=True)
    want = float(np.sqrt(((pa.reindex(pa.index.union(pb.index), fill_value=0)
                           - pb.reindex(pa.index.union(pb.index), fill_value=0)) ** 2).sum()))
    assert metrics.pmf_distance(a, b) == pytest.approx(want)
    assert metrics.pmf_distance(a, a) == 0


def test_data_metrics_read_group_rates():
    data = s_dependent()
    out = evaluate.fair_data_metrics(data.X, data.y, data.s, data.X, data.y, data.s)
    assert out["rd_data"] == pytest.approx(data.y[data.s == 1].mean() - data.y[data.s == 0].mean())
    assert out["dist_xy"] == 0 and out["dist_xys"] == 0
    assert 0 < out["ber"] < 0.3  # attribute a reveals s


def test_fairness_terms_have_zero_gradient_at_lambda_mu_zero():
    """lambda = mu = 0: D2 and D3 get no gradient from the D loss, and G / eta get the same gradient whatever D2 and
    D3 are (replacing them by freshly initialised networks changes nothing)."""
    cfg = registry.make("fairgan_plus_dp", **SMALL).cfg
    torch.manual_seed(0)
    m = fairgan.FairGANModel(cfg, [3, 3, 2], 2, "cpu", 0)
    data = s_dependent(400)
    m.set_data(data.X, data.y, data.s)
    real, fake = m.real_batch(50), m.fake_batch(50)
    fair = m.D2.parameters() + m.D3.parameters()
    grads = torch.autograd.grad(m.d_loss(real, tuple(t.detach() for t in fake), 0.0, 0.0).sum(), fair,
                                allow_unused=True)
    assert all(g is None or torch.count_nonzero(g) == 0 for g in grads)
    g1 = torch.autograd.grad(m.g_loss(real, fake, 0.0, 0.0).sum(), m.g_params, retain_graph=True)
    other = fairgan.FairGANModel(cfg, [3, 3, 2], 2, "cpu", 99)
    m.D2, m.D3 = other.D2, other.D3
    g2 = torch.autograd.grad(m.g_loss(real, fake, 0.0, 0.0).sum(), m.g_params, retain_graph=True)
    assert all(torch.equal(a, b) for a, b in zip(g1, g2, strict=True))
    g3 = torch.autograd.grad(m.g_loss(real, fake, 1.0, 1.0).sum(), m.g_params)
    assert any(not torch.allclose(a, b) for a, b in zip(g2, g3, strict=True))  # the terms do act when weighted


def test_ensemble_members_are_independent():
    """Seeds trained as one ensemble: a member's gradient is its own (the summed loss does not mix members)."""
    cfg = registry.make("acgan", **SMALL).cfg
    m = fairgan.FairGANModel(cfg, [3, 3, 2], 3, "cpu", 0)
    data = s_dependent(300)
    m.set_data(data.X, data.y, data.s)
    real, fake = m.real_batch(40), m.fake_batch(40)
    loss = m.g_loss(real, fake, 0.0, 0.0)
    full = torch.autograd.grad(loss.sum(), m.g_params, retain_graph=True)
    only0 = torch.autograd.grad(loss[0], m.g_params)
    for a, b in zip(full, only0, strict=True):
        assert torch.allclose(a[0], b[0]) and torch.count_nonzero(b[1:]) == 0


@pytest.mark.parametrize("algo", ["fairgan", "fairgan_plus_eo"])
def test_release_keeps_schema_and_one_hot_validity(algo):
    data = s_dependent(600)
    plugin, _ = fit(algo, data, **(SMALL | {"phase2_epochs": 2}))
    synth = plugin.sample(700, np.random.default_rng(0))
    assert list(synth.columns) == list(data.frame.columns) and len(synth) == 700
    for col, k in data.domain.items():
        assert synth[col].between(0, k - 1).all()
    X = plugin.enc.onehot(synth)
    assert set(np.unique(X)) <= {0.0, 1.0}
    assert (X.sum(1) == 3).all()  # exactly one level per attribute
    v = np.random.default_rng(0).random((50, 8))
    codes = fairgan.discretise(v, [3, 3, 2], "sample", np.random.default_rng(1))
    assert (codes >= 0).all() and (codes < np.array([3, 3, 2])).all()


def test_demographic_parity_lowers_rd_against_acgan():
    """Issue item 5: at the same seed, FairGAN+(DP)'s classifier has a smaller risk difference on the real data
    than ACGAN's (the label depends on S, and attribute a is a proxy of S)."""
    data = s_dependent(1000)
    rd = {}
    for algo in ("acgan", "fairgan_plus_dp"):
        plugin, _ = fit(algo, data, seed=3, **(SMALL | {"phase2_epochs": 10, "lr": 5e-3}))
        yhat = plugin.eta_predict(plugin.enc.onehot(data.frame))
        rd[algo] = metrics.GroupRates(data.y, yhat, data.s).difference("positive_rate")
    assert rd["acgan"] > 0.3  # the unconstrained classifier follows s
    assert abs(rd["fairgan_plus_dp"]) < rd["acgan"] - 0.15


def test_adv_debias_agrees_with_fairlearn():
    """C4 against fairlearn's AdversarialFairnessClassifier (logistic predictor, equalized-odds adversary) on the
    same rows: both lower |DTPR| / |DFPR| and RD from the plain LR, by comparable amounts."""
    fl = pytest.importorskip("fairlearn.adversarial")
    data = s_dependent(3000, seed=5)
    X, y, s = data.X, data.y, data.s
    plain = downstream.fit_predict("lr", X, y, X, lr_max_iter=2000)
    cfg = registry.make("adv_debias", epochs=30).cfg
    w, b = adv_debias.adversarial_debiasing(X, y, s, cfg, seed=0, progress=False)
    ours = ((X @ w + b) >= 0).astype(int)
    torch.manual_seed(0)
    ref = fl.AdversarialFairnessClassifier(backend="torch", predictor_model=[], adversary_model=[],
                                           constraints="equalized_odds", epochs=30, batch_size=128, alpha=1.0,
                                           learning_rate=1e-3, shuffle=True, random_state=0)
    ref.fit(X, y, sensitive_features=s)
    theirs = np.asarray(ref.predict(X)).astype(int)
    gaps = {k: metrics.classification(y, p, s) for k, p in (("plain", plain), ("ours", ours), ("fl", theirs))}
    assert gaps["plain"]["risk_difference"] > 0.4
    for key in ("risk_difference_abs", "equalized_odds_gap"):
        assert gaps["ours"][key] < gaps["plain"][key] and gaps["fl"][key] < gaps["plain"][key]
    assert abs(gaps["ours"]["risk_difference"] - gaps["fl"]["risk_difference"]) < 0.5 * gaps["plain"]["risk_difference"]


@needs_data("adult")
def test_adult_card_is_the_spec_encoding():
    train, test = table("adult_fairgan")
    assert train.X.shape == (45222, 57) and len(test) == 45222  # test_size 0: evaluation on the real table
    assert (train.X.sum(1) == 12).all()
    assert train.y[train.s == 1].mean() - train.y[train.s == 0].mean() == pytest.approx(0.198901, abs=1e-6)
    enc = fairgan.encoding_of(train)
    assert enc.dim == 57 and enc.sensitive == "sex" and enc.label == "income"
    assert np.array_equal(enc.onehot(train.frame), train.X)  # the generators' x is the classifiers' x


def test_non_binary_sensitive_column_is_refused():
    data = s_dependent(200)
    data.frame["sex"] = data.frame["a"]  # three codes
    data.domain = data.domain | {"sex": 3}
    with pytest.raises(Exception, match="needs a binary one"):
        fairgan.encoding_of(data)


def test_gan_building_blocks_shapes():
    ens = gan.Ensemble(2, "cpu", 0)
    g = gan.ResidualGenerator(ens, 16, 4)
    out = g(ens.randn(5, 16), ens.randint(4, 5))
    assert out.shape == (2, 5, 16)
    d = gan.MLP(ens, [7, 8, 1], minibatch_mean=True)
    assert d(ens.randn(5, 7)).shape == (2, 5, 1)
    w = gan.balanced_weights(torch.tensor([[1.0, 1, 0, 0, 0]]))
    assert torch.allclose(w.sum(), torch.tensor(1.0)) and torch.allclose(w[0, 0] * 2, torch.tensor(0.5))


def test_gan_training_context_flushes_denormals_and_restores():
    tiny = torch.tensor([1e-39])  # a float32 denormal
    assert (tiny * 1.0).item() > 0
    with torch_threads(1):
        if not torch.set_flush_denormal(True):
            pytest.skip("this CPU cannot flush denormals")
        with torch_threads(1):
            assert (tiny * 1.0).item() == 0.0  # flushed inside the GAN trainers' context
        assert (tiny * 1.0).item() == 0.0  # a nested context's end keeps the outer one's flush
    assert (tiny * 1.0).item() > 0  # and only there


def test_graphed_step_runs_eagerly_on_a_cpu():
    ens = gan.Ensemble(2, "cpu", [0, 1])
    draws = []
    step = gan.Graphed(lambda: draws.append(ens.rand(3)), ens)
    for _ in range(5):
        step()
    assert not step.enabled and step.graph is None and len(draws) == 5
    assert not torch.equal(draws[0], draws[1])  # every call draws afresh


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_graphed_step_replays_fresh_draws_and_trains_like_eager():
    """On a GPU: each replay draws new numbers from the registered seeded generators (never the captured batch
    again), and a graphed FairGAN+ reaches the eager run's loss level."""
    ens = gan.Ensemble(2, "cuda", [0, 1])
    out = torch.zeros(2, 4, device="cuda")
    step = gan.Graphed(lambda: out.copy_(ens.rand(4)), ens, warm=1)
    seen = []
    for _ in range(4):
        step()
        seen.append(out.clone())
    assert step.graph is not None
    assert all(not torch.equal(a, b) for a, b in zip(seen, seen[1:], strict=False))
    rng = np.random.default_rng(0)
    X = np.eye(6, dtype=np.float32)[rng.integers(6, size=2000)]
    y, s = rng.integers(2, size=2000), rng.integers(2, size=2000)
    cfg = registry.make("fairgan_plus_dp", profile="smoke").cfg
    losses = {}
    for graphed in (False, True):
        m = fairgan.FairGANModel(cfg, [6], 2, "cuda", [0, 1])
        m.set_data(X, y, s)
        it = gan.Graphed(lambda m=m: m.iteration(100, 1.0, 1.0), m.ens) if graphed else (
            lambda m=m: m.iteration(100, 1.0, 1.0))
        for _ in range(300):
            it()
        assert not graphed or it.graph is not None  # captured, not fallen back to eager
        real, fake = m.real_batch(500), m.fake_batch(500)
        losses[graphed] = m.d_loss(real, fake, 1.0, 1.0).detach().cpu().numpy()
    assert np.isfinite(losses[True]).all()
    np.testing.assert_allclose(losses[True], losses[False], rtol=0.5)



# -- schedules (issue 47: a default run within ~5 minutes, the paper schedule one key away) -------------------------
def test_default_schedule_replaces_only_the_paper_epochs():
    default = registry.make("fairgan").cfg
    assert default.schedule_named() == (fairgan.DEFAULT, "default")
    assert registry.make("fairgan", schedule="paper").cfg.schedule_named() == (fairgan.PAPER, "paper")
    own = registry.make("fairgan", phase1_epochs=7).cfg.schedule_named()  # epochs a user sets are kept
    assert own == (fairgan.PAPER | {"phase1_epochs": 7}, "configured")
    assert registry.make("fairgan", profile="smoke").cfg.epochs() == fairgan.PROFILES["smoke"]
    assert registry.make("fairgan", profile="fast", schedule="paper").cfg.epochs() == fairgan.PROFILES["fast"]
    from privfair_cli.algorithms import cfgan

    assert registry.make("cfgan_te").cfg.epochs() == cfgan.DEFAULT
    assert registry.make("cfgan_ce").cfg.epochs() == cfgan.DEFAULT_CE
    assert registry.make("causalgan", schedule="paper").cfg.epochs() == cfgan.PAPER


def test_gan_experiments_pin_the_paper_schedule_and_keep_their_run_ids():
    """Tables 6.1-7.2 pin `algo.schedule: paper` (the GANs' configured epochs); the plugins swept beside the GANs
    accept it, and at paper the key is out of the run identity (runid.ADDED), so every recorded run keeps its id."""
    import csv
    import gzip
    import io
    import json
    from pathlib import Path

    from privfair_cli import runid, schema
    from privfair_cli.compose import compose

    for name in ("xu2021_table6_1", "xu2021_table6_2", "xu2021_table7_1", "xu2021_table7_2"):
        swept = compose([f"experiment={name}"], with_hydra=True).hydra.sweeper.params.algo.split(",")
        for algo in swept:  # every plugin swept beside the GANs accepts the pinned key
            schema.validate(compose([f"experiment={name}", f"algo={algo}", "seed=0"]))
    root = Path(__file__).resolve().parents[1] / "results" / "reproduce"
    for name, algos in (("xu2021_table6_1", ("lr_real", "fairgan")), ("xu2021_table7_1", ("real_data", "causalgan",
                                                                                          "cfgan_se", "pse_dr"))):
        path = root / name / "runs.csv.gz"
        rows = list(csv.DictReader(io.TextIOWrapper(gzip.open(path)))) if path.exists() else []
        for algo in algos:
            cfg = compose([f"experiment={name}", f"algo={algo}", "seed=0"])
            assert cfg.algo.schedule == "paper"
            for row in rows:
                if row["algo"] == algo and row["seed"] == "0":
                    assert runid.short_id(compose([f"experiment={name}", *json.loads(row["overrides"])])) == \
                        row["config_hash"]


def test_calibration_and_phases_leave_training_bit_identical(capsys, monkeypatch):
    """`fit` times a throwaway model (the estimate and the whole-run ETA) and runs its phases under one bar: the
    trained model equals the same steps taken by hand, bit for bit; an estimate above the limit prints a line."""
    data = s_dependent(600)
    cfg = registry.make("fairgan_plus_dp", **SMALL).cfg
    enc = fairgan.encoding_of(data)
    X = enc.onehot(data.frame)
    monkeypatch.setattr(gan, "LONG_RUN_S", 0.0)
    with torch_threads(1):
        a = fairgan.FairGANModel(cfg, enc.sizes, 1, "cpu", 3).fit(X, data.y, data.s, "probe-test")
        b = fairgan.FairGANModel(cfg, enc.sizes, 1, "cpu", 3)
        b.set_data(X, data.y, data.s)
        per_epoch = -(-len(X) // 100)
        for _ in range(3 * per_epoch):
            b.pretrain_step(100)
        for i in range(4 * per_epoch):
            lam = 0.0 if i < 2 * per_epoch else 1.0
            b.iteration(100, lam, lam)
    for p, q in zip(a.opt_g.params + a.opt_d.params + a.opt_ae.params,
                    b.opt_g.params + b.opt_d.params + b.opt_ae.params, strict=True):
        assert torch.equal(p, q)
    assert "probe-test: the configured schedule" in capsys.readouterr().out


class _Stop(Exception):
    pass


def test_interrupted_training_resumes_from_its_checkpoint_to_the_same_model(tmp_path, monkeypatch, capsys):
    """Inside `progress.checkpoints`, a training stopped part-way (here: an exception in phase 2, as SIGTERM
    raises one) resumes from its last checkpoint in a fresh process-like model of the same run and ends with the
    uninterrupted model's parameters, bit for bit; the folder is removed once a block completes."""
    from privfair_cli import progress

    data = s_dependent(3000)
    cfg = registry.make("fairgan_plus_dp", **SMALL).cfg
    enc = fairgan.encoding_of(data)
    X = enc.onehot(data.frame)
    with torch_threads(1):
        whole = fairgan.FairGANModel(cfg, enc.sizes, 1, "cpu", 5).fit(X, data.y, data.s)
        monkeypatch.setattr(gan, "CHECKPOINT_EVERY_S", 0.0)  # a checkpoint at every chance (every 50 steps)
        folder = tmp_path / ".checkpoint"
        calls = {"n": 0}
        original = fairgan.FairGANModel.iteration

        def stopping(self, *a):
            calls["n"] += 1
            if calls["n"] == 6 + 60 + 55:  # 6 timing calls, phase 1's 60 iterations, then phase 2's 55th: the last
                raise _Stop               # checkpoint is phase 2's step 50, so training resumes mid-phase
            return original(self, *a)

        with pytest.raises(_Stop), progress.checkpoints(folder):
            monkeypatch.setattr(fairgan.FairGANModel, "iteration", stopping)
            fairgan.FairGANModel(cfg, enc.sizes, 1, "cpu", 5).fit(X, data.y, data.s)
        assert list(folder.glob("gan-*.pt"))  # kept for the next attempt
        monkeypatch.setattr(fairgan.FairGANModel, "iteration", original)
        capsys.readouterr()
        with progress.checkpoints(folder):
            resumed = fairgan.FairGANModel(cfg, enc.sizes, 1, "cpu", 5).fit(X, data.y, data.s)
        assert not folder.exists()
        assert "resuming from its checkpoint at" in capsys.readouterr().out  # mid-phase: GAN iterations (phase 2) 50
    for p, q in zip(whole.state_tensors(), resumed.state_tensors(), strict=True):
        assert torch.equal(p, q)
