"""Causal effects (algorithms/causal_effects.py) and the cfgan family (algorithms/cfgan.py), spec cfgan.md."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from privfair_cli import evaluate, registry
from privfair_cli.algorithms import causal_effects as ce
from privfair_cli.algorithms import cfgan
from privfair_cli.datasets import synth_causal
from privfair_cli.errors import ConfigError, DataError
from privfair_cli.threads import torch_threads
from tests.conftest import card, fit, needs_data, table

# spec §6: exact values by enumeration
EXACT = {"te": 0.2727, "se": 0.0926, "de": 0.1717, "ce_a0": 0.2649, "ce_a1": 0.2805, "rd": 0.3058}
SPEC = {"edges": {"A": ["S", "B", "Y"], "S": ["B", "Y"], "B": ["Y"]}, "sensitive": "S", "outcome": "Y",
        "unjustified": ["B"], "context": ["A"]}


def _sig(x):
    return 1 / (1 + np.exp(-x))


def exact_joint(g):
    """All 16 configurations of the spec §6 model and their probabilities."""
    C = ce._all_configs(len(g.nodes))
    A, S, B, Y = (C[:, g.index[k]] for k in "ASBY")

    def bern(v, p):
        return np.where(v == 1, p, 1 - p)

    w = 0.5 * bern(S, _sig(-0.5 + A)) * bern(B, _sig(-1 + 1.5 * S + 0.5 * A)) * bern(
        Y, _sig(-1.5 + 0.8 * S + 1.2 * B + 0.5 * A))
    return C, w


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def graph():
    return ce.CausalGraph.from_spec(SPEC)


# ---------------------------------------------------------------------------------------------- estimators
def test_exact_effects_of_the_spec_model(graph):
    C, w = exact_joint(graph)
    cpt = ce.cpts(C, graph, w)
    assert ce.total_effect(C, graph, "adjust", w) == pytest.approx(EXACT["te"], abs=1e-4)
    assert ce.total_effect(C, graph, "factorised", w) == pytest.approx(EXACT["te"], abs=1e-4)
    assert ce.path_specific_effect(cpt, "indirect") == pytest.approx(EXACT["se"], abs=1e-4)
    assert ce.path_specific_effect(cpt, "direct") == pytest.approx(EXACT["de"], abs=1e-4)
    assert ce.counterfactual_effects(C, graph, w) == pytest.approx([EXACT["ce_a1"], EXACT["ce_a0"]], abs=1e-4)
    S, Y = C[:, graph.index["S"]], C[:, graph.index["Y"]]
    rd = (w * S * Y).sum() / (w * S).sum() - (w * (1 - S) * Y).sum() / (w * (1 - S)).sum()
    assert rd == pytest.approx(EXACT["rd"], abs=1e-4)  # confounded: differs from TE
    assert (w * S).sum() == pytest.approx(0.5, abs=1e-9)


def test_estimators_recover_the_effects_from_samples(graph):
    frame = synth_causal.sample(card("synth_causal"), 1_000_000, np.random.default_rng(1))
    out = ce.effect_metrics(frame, graph)
    assert out["total_effect"] == pytest.approx(EXACT["te"], abs=0.005)
    assert out["indirect_discrimination"] == pytest.approx(EXACT["se"], abs=0.005)
    assert out["direct_discrimination"] == pytest.approx(EXACT["de"], abs=0.005)
    assert [out["ce_o1"], out["ce_o2"]] == pytest.approx([EXACT["ce_a1"], EXACT["ce_a0"]], abs=0.005)


def _pgmpy_network(g, cpt):
    from pgmpy.factors.discrete import TabularCPD
    from pgmpy.models import DiscreteBayesianNetwork

    net = DiscreteBayesianNetwork(g.edges())
    net.add_nodes_from(g.nodes)
    for i, n in enumerate(g.nodes):
        pa = list(g.parents[n])
        # pgmpy columns: the last evidence variable varies fastest; our bit b = parents[b]
        cols = [sum(v << b for b, v in enumerate(c)) for c in np.ndindex(*([2] * len(pa)))]
        p1 = cpt.tables[i][cols] if pa else cpt.tables[i]
        net.add_cpds(TabularCPD(n, 2, [list(1 - p1), list(p1)], evidence=pa or None,
                                evidence_card=[2] * len(pa) or None))
    assert net.check_model()
    return net


def _pgmpy_do(net, y, do, evidence=None):
    from pgmpy.inference import CausalInference

    q = CausalInference(net).query([y], do=do, evidence=evidence, show_progress=False)
    return float(q.values[1])


@pytest.mark.parametrize("seed", [0, 1])
def test_total_and_conditional_effects_agree_with_pgmpy(seed):
    """A random 6-node binary network: our TE (factorised and back-door) and CE equal pgmpy's do-queries."""
    rng = np.random.default_rng(seed)
    spec = {"edges": {"W": ["S", "M", "Y"], "O": ["S", "M", "Y"], "S": ["M", "Y", "K"], "M": ["Y"],
                      "K": ["Y"]}, "sensitive": "S", "outcome": "Y", "unjustified": ["M"], "context": ["O"]}
    g = ce.CausalGraph.from_spec(spec)
    C = ce._all_configs(len(g.nodes))
    w = np.ones(len(C))
    for n in g.nodes:  # a random logistic model
        pa = list(g.parents[n])
        coef = rng.normal(0, 1.5, len(pa) + 1)
        p1 = _sig(coef[0] + sum(c * C[:, g.index[p]] for c, p in zip(coef[1:], pa, strict=True)))
        w *= np.where(C[:, g.index[n]] == 1, p1, 1 - p1)
    cpt = ce.cpts(C, g, w)
    net = _pgmpy_network(g, cpt)
    te = _pgmpy_do(net, "Y", {"S": 1}) - _pgmpy_do(net, "Y", {"S": 0})
    assert ce.total_effect(C, g, "factorised", w) == pytest.approx(te, abs=1e-9)
    assert ce.total_effect(C, g, "adjust", w) == pytest.approx(te, abs=1e-9)
    ces = ce.counterfactual_effects(C, g, w)
    for k, o in enumerate(ce.contexts(g)):
        want = _pgmpy_do(net, "Y", {"S": 1}, {"O": o[0]}) - _pgmpy_do(net, "Y", {"S": 0}, {"O": o[0]})
        assert ces[k] == pytest.approx(want, abs=1e-9)
    # the path-specific effects split the total effect here (S's children M, K, Y; pi_d + pi_i + via K)
    assert ce.path_specific_effect(cpt, "total") == pytest.approx(te, abs=1e-9)


def test_graph_validation_errors(graph):
    with pytest.raises(ConfigError, match="cycle"):
        ce.CausalGraph.from_spec(SPEC | {"edges": SPEC["edges"] | {"Y": ["A"]}})
    with pytest.raises(DataError, match=r"names column\(s\) \['B'\] that the data lacks"):
        ce.CausalGraph.from_spec(SPEC, ["A", "S", "Y"])
    with pytest.raises(ConfigError, match="not an ancestor"):
        ce.CausalGraph.from_spec(SPEC | {"edges": {"A": ["S", "B", "Y"], "B": ["Y"]}})
    with pytest.raises(ConfigError, match="descend from S"):
        ce.CausalGraph.from_spec(SPEC | {"context": ["B"]})
    with pytest.raises(ConfigError, match="recanting witness"):  # pi = paths through K only, S -> B shared
        g = ce.CausalGraph.from_spec({"edges": {"S": ["B"], "B": ["K", "Y"], "K": ["Y"]}, "sensitive": "S",
                                      "outcome": "Y", "unjustified": ["K"]})
        ce.path_edges(g, "indirect")
    assert graph.nodes.index("A") < graph.nodes.index("S") < graph.nodes.index("B") < graph.nodes.index("Y")


def test_chi2_forms():
    a = np.array([[0, 0], [0, 1], [1, 1], [1, 1]])
    b = np.array([[0, 0], [0, 0], [1, 1], [1, 0]])
    # cells 00: 1 vs 2, 01: 1 vs 0, 11: 2 vs 1, 10: 0 vs 1
    assert ce.chi2(a, b) == pytest.approx(1 / 3 + 1 + 1 / 3 + 1)
    assert ce.chi2(a, b, "real") == pytest.approx(1 + 1 + 1 / 2)
    assert ce.chi2(a, a) == 0


@needs_data("adult")
def test_adult_real_data_reproduces_the_published_effects():
    train, _ = table("adult_cfgan")
    g = ce.CausalGraph.from_spec(train.meta["causal_graph"])
    out = ce.effect_metrics(train.frame, g)
    assert len(train) == 65_123
    assert out["total_effect"] == pytest.approx(0.1936, abs=1e-4)
    assert out["indirect_discrimination"] == pytest.approx(0.1754, abs=5e-4)
    assert out["direct_discrimination"] < 0.05
    assert [out[f"ce_o{k}"] for k in range(1, 5)] == pytest.approx([0.2023, 0.1293, 0.1266, 0.1785], abs=1e-4)


# ---------------------------------------------------------------------------------------------- generators
def _small(name, **kw):
    cfg = registry.make(name).cfg
    return dataclasses.replace(cfg, **kw)


def test_generator_never_reads_a_descendant(graph):
    """Changing a node's sub-network leaves every non-descendant's samples unchanged (same noise); the input mask
    of every node is its parent set."""
    model = cfgan.CFGANModel(graph, _small("cfgan_te"), 1, "cpu", 0)
    P = model.P.numpy()
    for n in graph.nodes:
        assert {graph.nodes[j] for j in np.flatnonzero(P[graph.index[n]])} == set(graph.parents[n])
    before = model.generate(2000, 7)[0]
    N = len(graph.nodes)
    for node in ("B", "S"):
        k = graph.index[node]
        with torch.no_grad():
            for layer in model.layers:
                layer.W.view(1, N, *layer.W.shape[1:])[0, k] += 3.0
                layer.b.view(1, N, *layer.b.shape[1:])[0, k] -= 1.0
        after = model.generate(2000, 7)[0]
        keep = [graph.index[n] for n in graph.nodes if n not in graph.descendants(node) and n != node]
        assert np.array_equal(before[:, keep], after[:, keep])
        assert not np.array_equal(before[:, k], after[:, k])
        before = after


def test_interventional_channels_share_noise(graph):
    """The reference channel equals G1 with S := 0 on the same noise; non-descendants of S are identical in all."""
    model = cfgan.CFGANModel(graph, _small("cfgan_se"), 1, "cpu", 0)
    z, L = model.noise(500)
    with torch.no_grad():
        vals = model.run(z, L, ("obs", "ref", "int"))
    a = graph.index["A"]
    assert torch.equal(vals[0, 0, :, a], vals[0, 1, :, a]) and torch.equal(vals[0, 1, :, a], vals[0, 2, :, a])
    assert (vals[0, 1, :, graph.index["S"]] == 0).all() and (vals[0, 2, :, graph.index["S"]] == 1).all()
    s0 = vals[0, 0, :, graph.index["S"]] == 0  # where G1 drew S = 0 the observational and reference runs agree
    assert torch.equal(vals[0, 0, s0], vals[0, 1, s0])


@pytest.fixture(scope="module")
def synth_frame():
    return synth_causal.sample(card("synth_causal"), 20_000, np.random.default_rng(3))


def test_cfgan_te_removes_the_total_effect_and_causalgan_keeps_it(graph, synth_frame):
    """Three seeds trained as one batched ensemble per model (a short schedule: 3 warm-up + 5 fair epochs).

    After 5 fair epochs a single seed's |TE| scatters between about 0.005 and 0.10 (the 0.05 threshold itself needs
    the spec's schedule), so the assertion is on the seeds' mean: the fair model removes most of the real effect
    (|TE| at most 0.1 and at most 0.35 of CausalGAN's), CausalGAN keeps it."""
    V = ce.as_matrix(synth_frame, graph)
    real_te = ce.effect_metrics(synth_frame, graph)["total_effect"]
    out = {}
    for name in ("causalgan", "cfgan_te"):
        cfg = _small(name, warmup_epochs=3, fair_epochs=5, lr=1e-3)  # a short schedule: a faster lr
        with torch_threads(1):
            model = cfgan.CFGANModel(graph, cfg, 3, "cpu", 0).fit(V, progress=False)
        G = model.generate(20_000, 1)
        out[name] = np.mean([ce.effect_metrics(pd.DataFrame(G[k], columns=graph.nodes), graph)["total_effect"]
                             for k in range(3)])
    assert abs(out["cfgan_te"]) <= 0.1 and abs(out["cfgan_te"]) <= 0.35 * out["causalgan"]
    assert out["causalgan"] == pytest.approx(real_te, abs=0.06)
    assert out["causalgan"] > 0.15


def test_ensemble_members_train_independently(graph, synth_frame):
    """Two seeds batched as one model: member 0's loss has no gradient on member 1's node sub-networks."""
    model = cfgan.CFGANModel(graph, _small("cfgan_te"), 2, "cpu", 0)
    model.V = torch.tensor(ce.as_matrix(synth_frame, graph), dtype=torch.float32)
    fake, yp, yn = model.fake(64, 1.0)
    loss = model.g_loss(fake, yp, yn, 1.0)
    g0 = torch.autograd.grad(loss[0], model.g_params, retain_graph=True)
    W = model.layers[0].W
    N = len(graph.nodes)
    member1 = g0[0].view(2, N, *W.shape[1:])[1]
    assert torch.count_nonzero(member1) == 0


# ---------------------------------------------------------------------------------------------- baselines
@pytest.fixture(scope="module")
def synth_data():
    train, _ = table("synth_causal", rows_generated=20_000)
    return train


def test_pse_dr_bounds_both_path_specific_effects(synth_data):
    plugin, _ = fit("pse_dr", synth_data)
    assert abs(plugin.extra_metrics()["model_se_direct"]) <= 0.05 + 1e-6
    assert abs(plugin.extra_metrics()["model_se_indirect"]) <= 0.05 + 1e-6
    released = plugin.sample(len(synth_data), np.random.default_rng(0))
    out = ce.effect_metrics(released, plugin.graph)
    assert abs(out["direct_discrimination"]) < 0.05 + 0.03 and abs(out["indirect_discrimination"]) < 0.05 + 0.03
    # the real effects were far above the bound: the QP had to move q
    assert ce.effect_metrics(synth_data.frame, plugin.graph)["direct_discrimination"] > 0.12


def test_a1_has_no_counterfactual_effect_and_a3_reads_residuals(synth_data):
    a1, _ = fit("cf_a1", synth_data)
    out = ce.effect_metrics(a1.sample(len(synth_data), None), a1.graph)
    assert out["ce_o1"] == pytest.approx(0, abs=1e-12) and out["ce_o2"] == pytest.approx(0, abs=1e-12)
    a3, _ = fit("cf_a3", synth_data)
    V = ce.as_matrix(synth_data.frame, a3.graph)
    assert a3.features(V).shape[1] == 2  # A plus B's residual (S and Y excluded)


def test_release_evaluation_of_the_real_table(synth_data):
    out = evaluate.release_effects(synth_data, synth_data.frame)
    assert out["chi2"] == 0
    assert 0.5 < out["acc_lr"] <= 1 and set(out) >= {"acc_svm", "acc_dt", "acc_rf", "total_effect", "ce_o2"}
