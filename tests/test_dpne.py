"""Network-embedding family (dpne.md): graph loader rule, M and Lemma 1, nemf vs a truncated SVD, noise scales,
link-prediction splits, one run end to end."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats
from scipy.sparse import csgraph

from privfair_cli.algorithms import dpne
from privfair_cli.datasets import graphs
from privfair_cli.errors import DataError
from privfair_cli.privacy import Budget, PrivacyLedger
from tests.conftest import fit, needs_data, table


def sbm(n=240, blocks=3, p_in=0.12, p_out=0.01, seed=0) -> graphs.Graph:
    rng = np.random.default_rng(seed)
    z = np.arange(n) % blocks
    prob = np.where(z[:, None] == z[None, :], p_in, p_out)
    upper = np.triu(rng.random((n, n)) < prob, 1)
    u, v = np.nonzero(upper)
    return graphs.build(np.column_stack([u, v]), n)


# ---------------------------------------------------------------------------------------------- loader rule
def test_rule_drops_direction_duplicates_and_self_loops():
    edges = np.array([[0, 1], [1, 0], [0, 1], [2, 2], [1, 2], [3, 3]])
    g = graphs.build(edges, 5)
    assert g.counts == {"lines": 6, "duplicate_lines": 1, "self_loop_lines": 2, "edges": 2, "vertices": 5,
                        "isolated": 2}
    assert (g.adjacency != g.adjacency.T).nnz == 0 and g.adjacency.diagonal().sum() == 0
    assert g.edges().tolist() == [[0, 1], [1, 2]]


def test_unknown_node_id_is_one_line_error(tmp_path):
    (tmp_path / "e.txt").write_text("0 1\n1 7\n")
    (tmp_path / "l.txt").write_text("0 0\n1 1\n2 0\n")
    card = {"name": "toy", "files": {"e.txt": {}, "l.txt": {}}, "edges": "e.txt", "labels": "l.txt"}
    with pytest.raises(DataError, match=r"line 2 names node 7, which is not a vertex") as err:
        graphs.read([tmp_path / "e.txt", tmp_path / "l.txt"], card)
    assert "\n" not in str(err.value)


def test_isolated_vertices_refused_when_the_card_says_error():
    g = graphs.build(np.array([[0, 1]]), 3)
    with pytest.raises(DataError, match="1 isolated vertices"):
        graphs.check(g, {"name": "toy", "isolated": "error"})
    graphs.check(g, {"name": "toy", "isolated": "keep"})


@pytest.mark.parametrize("name, counts", [
    pytest.param(name, counts, marks=needs_data(name)) for name, counts in
    (("cora", (2708, 5429, 5278, 7, 0)), ("citeseer", (3312, 4732, 4551, 6, 48)),
     ("wiki", (2405, 17981, 11596, 17, 42)))
])
def test_published_datasets_under_the_rule(name, counts):
    train, _ = table(name)
    c = train.meta["graph"].counts
    assert (c["vertices"], c["lines"], c["edges"], c["classes"], c["isolated"]) == counts


# ---------------------------------------------------------------------------------------------- M and Lemma 1
def test_walk_matrix_rows():
    g = graphs.build(np.array([[0, 1], [1, 2]]), 4)
    m = dpne.walk_matrix(g.adjacency)
    np.testing.assert_allclose(m.sum(axis=1), [1, 1, 1, 0])
    p = dpne.transition(g.adjacency)
    np.testing.assert_allclose(m, (p + p @ p) / 2)


def test_one_edge_changes_m_by_at_most_lemma1_sensitivity():
    """Brute force over every graph on 5 vertices and every single-edge change: ||M' - M||_F <= sqrt(2) (it is
    1.0 at most); the L1 change exceeds sqrt(2) (spec C3, why dpm claims heuristic)."""
    pairs = list(itertools.combinations(range(5), 2))
    worst_f = worst_l1 = 0.0
    for mask in range(1 << len(pairs)):
        a = np.zeros((5, 5))
        for bit, (i, j) in enumerate(pairs):
            if mask >> bit & 1:
                a[i, j] = a[j, i] = 1
        m = dpne.walk_matrix(a)
        for i, j in pairs:
            b = a.copy()
            b[i, j] = b[j, i] = 1 - a[i, j]
            d = dpne.walk_matrix(b) - m
            worst_f, worst_l1 = max(worst_f, np.linalg.norm(d)), max(worst_l1, np.abs(d).sum())
    assert worst_f <= dpne.LEMMA1_SENSITIVITY + 1e-12
    assert worst_f == pytest.approx(1.0)
    assert worst_l1 > dpne.LEMMA1_SENSITIVITY


# ---------------------------------------------------------------------------------------------- nemf vs SVD
def principal_cosines(a, b):
    qa, _ = np.linalg.qr(a)
    qb, _ = np.linalg.qr(b)
    return np.linalg.svd(qa.T @ qb, compute_uv=False)


def test_nemf_recovers_the_truncated_svd_subspace():
    from sklearn.decomposition import TruncatedSVD

    g, k = sbm(), 3
    m = dpne.walk_matrix(g.adjacency)
    svd = TruncatedSVD(n_components=k, algorithm="arpack").fit(m)
    h = dpne.context(m, k, "unit")
    plugin, _ = fit("nemf", type("D", (), {"meta": {"graph": g}, "name": "sbm"})(), k=k, epochs=60,
                    save_embedding=False)
    u_k = m @ svd.components_.T  # left singular subspace (U_k S_k)
    assert principal_cosines(u_k, plugin.embedding).min() > 0.99
    assert principal_cosines(svd.components_.T, h).min() > 0.9  # stage 1: H spans ~V_k (rows normalised)


def test_block_sgd_equals_the_literal_per_entry_loop():
    g = sbm(n=60)
    m, rng = dpne.walk_matrix(g.adjacency), np.random.default_rng(3)
    h = dpne.context(m, 4, "unit")
    w0, noise = rng.normal(0, 0.01, (60, 4)), rng.normal(0, 1, (60, 4))
    w = w0.copy()
    for j in np.random.default_rng(1).permutation(60):  # spec §3.3, linear noise term
        e = m[:, j] - w @ h[j]
        w -= 0.015 * (-2 * e[:, None] * h[j][None, :] + (2 * 0.001 * w + noise) / 60)
    ours = dpne.SGD(0.015, 0.001, 1, 16, "linear").run(m, h, w0, noise, np.random.default_rng(1))
    np.testing.assert_allclose(ours, w, atol=1e-10)
    single = dpne.SGD(0.015, 0.001, 1, 16, "linear", "float32").run(m, h, w0, noise, np.random.default_rng(1))
    np.testing.assert_allclose(single, w, atol=1e-5)  # precision=float32: the same steps, float32 products


# ---------------------------------------------------------------------------------------------- noise scales
def test_dpm_laplace_scale_is_sensitivity_over_eps():
    g, eps = sbm(n=200), 2.0
    ledger = PrivacyLedger(Budget(eps))
    m = dpne.walk_matrix(g.adjacency)
    m_hat = dpne.noisy_walk_matrix(g, dpne.LEMMA1_SENSITIVITY, eps, np.random.default_rng(0), ledger)
    scale = math.sqrt(2) / eps
    assert stats.kstest((m_hat - m).ravel()[:20000], "laplace", args=(0, scale)).pvalue > 1e-3
    entry = ledger.to_dict()["ledger"][0]
    assert entry["sensitivity"] == pytest.approx(1.41421356) and entry["eps"] == eps


@pytest.mark.parametrize("eps", [0.1, 10.0])
def test_objective_noise_norms_are_gamma_k_2delta_over_eps(eps):
    k = 5
    eta = dpne.objective_noise(20000, k, eps, math.sqrt(2), np.random.default_rng(1))
    norms = np.linalg.norm(eta, axis=1)
    assert stats.kstest(norms, "gamma", args=(k, 0, 2 * math.sqrt(2) / eps)).pvalue > 1e-3
    assert np.abs((eta / norms[:, None]).mean(axis=0)).max() < 0.03  # uniform directions


def sgd_fit(m, h, noise, noise_term="linear", epochs=20, block=16):
    w0 = np.random.default_rng(0).normal(0, 0.01, (m.shape[0], h.shape[1]))
    return dpne.SGD(0.015, 0.001, epochs, block, noise_term, "float64").run(m, h, w0, noise, np.random.default_rng(2))


@pytest.mark.parametrize("eps", [1.0, 10.0])
def test_linear_release_carries_the_noise_theorem7_draws(eps):
    """Theorem 7's mechanism end to end: the SGD of §3.3 with the linear term lands on the exact minimiser of Eq. 5.7,
    and the noise read back from the released W through the proof's first-order condition (Eq. 5.8:
    eta_i = 2 H^T (m_i - H w_i) - 2 lambda w_i) is the drawn noise, its norms Gamma(k, 2 Delta / eps)."""
    g, k = sbm(), 4
    m = dpne.walk_matrix(g.adjacency)
    h = dpne.context(m, k, "unit")
    noise = dpne.objective_noise(m.shape[0], k, eps, math.sqrt(2), np.random.default_rng(1))
    exact = dpne.linear_minimiser(m, h, noise, 0.001)
    w = sgd_fit(m, h, noise)
    assert np.abs(w - exact).max() < 0.1 * np.abs(exact).max()  # constant-step SGD: within its noise floor
    read_back = 2 * (m @ h - w @ h.T @ h) - 2 * 0.001 * w
    assert np.linalg.norm(read_back - noise) < 0.2 * np.linalg.norm(noise)  # 0.14 at eps 10: the SGD floor
    assert stats.kstest(np.linalg.norm(read_back, axis=1), "gamma",
                        args=(k, 0, 2 * math.sqrt(2) / eps)).pvalue > 1e-3


def test_linear_solution_moves_with_the_noise_draw_as_delta_over_eps():
    """Two noise draws move the linear minimiser apart by (H^T H + lambda I)^-1 (eta - eta') / 2: ten times less at
    ten times the eps, and between the bounds the extreme eigenvalues give (E||eta_i|| = 2 Delta k / eps)."""
    g, k, n = sbm(), 4, 240
    m = dpne.walk_matrix(g.adjacency)
    h = dpne.context(m, k, "unit")
    eig = np.linalg.eigvalsh(h.T @ h + 0.001 * np.eye(k))
    spread = {}
    for eps in (1.0, 10.0):
        a, b = (dpne.objective_noise(n, k, eps, math.sqrt(2), np.random.default_rng(s))
                for s in (int(eps), int(eps) + 1))
        moved = np.linalg.norm(dpne.linear_minimiser(m, h, a, 0.001) - dpne.linear_minimiser(m, h, b, 0.001),
                               axis=1)
        expected = np.linalg.norm(a - b, axis=1) / 2
        assert np.all(moved >= expected / eig.max() - 1e-9) and np.all(moved <= expected / eig.min() + 1e-9)
        spread[eps] = moved.mean()
    assert spread[1.0] / spread[10.0] == pytest.approx(10.0, rel=0.15)


def test_data_part_of_the_first_order_condition_is_at_most_one():
    """||H^T m_i|| <= sum_j m_ij ||h_j|| <= 1 (rows of M sum to 1 or 0, rows of H unit): against E||eta_i|| / 2 =
    Delta k / eps (141 at k = 100, eps = 1) the linear release is noise, the module docstring's argument that the
    published utility at eps >= 1 comes from the abs term."""
    g = graphs.build(np.vstack([sbm(n=90).edges(), [[90, 91]]]), 95)  # a pair and isolated vertices too
    m = dpne.walk_matrix(g.adjacency)
    for k in (2, 8):
        assert np.linalg.norm(m @ dpne.context(m, k, "unit"), axis=1).max() <= 1 + 1e-9


def test_abs_term_nearly_vanishes_at_the_optimum():
    """C4 measured: at eps = 1 the linear release sits 11 x ||W|| away from the non-private minimiser, the abs one
    (sign per column, the spec's loop) as close as nemf's own constant-step SGD, with <W, N> pinned near 0."""
    g, k = sbm(), 4
    m = dpne.walk_matrix(g.adjacency)
    h = dpne.context(m, k, "unit")
    noise = dpne.objective_noise(m.shape[0], k, 1.0, math.sqrt(2), np.random.default_rng(1))
    w_np = dpne.linear_minimiser(m, h, None, 0.001)

    def dev(w):
        return np.linalg.norm(w - w_np) / np.linalg.norm(w_np)

    assert dev(dpne.linear_minimiser(m, h, noise, 0.001)) > 5
    w_abs = sgd_fit(m, h, noise, "abs", epochs=60, block=1)
    assert dev(w_abs) < 2 * dev(sgd_fit(m, h, None, epochs=60)) + 0.05
    assert abs(np.sum(w_abs * noise)) < 0.1 * np.linalg.norm(w_abs) * np.linalg.norm(noise)


def test_dpne_ledger_records_lemma1_and_claims():
    g = sbm(n=120)
    data = type("D", (), {"meta": {"graph": g}, "name": "sbm"})()
    plugin, ledger = fit("dpne", data, eps=1.0, k=4, save_embedding=False)
    entry = ledger.to_dict()["ledger"][0]
    assert entry["mechanism"] == "objective_perturbation"
    assert entry["sensitivity"] == pytest.approx(math.sqrt(2)) and entry["eps"] == 1.0
    assert plugin.claims() == "heuristic" and "Theorem 7 does not cover it" in plugin.warnings()[0]
    assert plugin.extra_metrics()["sensitivity_M_l2"] == pytest.approx(1.4142, abs=1e-4)
    linear, _ = fit("dpne", data, eps=1.0, k=4, noise_term="linear", save_embedding=False)
    assert linear.claims() == "heuristic"  # H is learned without privacy (C2): a stated gap in the proof
    assert "Theorem 7 does not cover the released W" in linear.warnings()[0] and len(linear.warnings()) == 1


def test_k_not_below_the_vertex_count_is_refused():
    from privfair_cli.errors import ConfigError

    data = type("D", (), {"meta": {"graph": sbm(n=30)}, "name": "sbm"})()
    with pytest.raises(ConfigError, match="algo.k=30 must be smaller than the number of vertices"):
        fit("nemf", data, k=30)


# ---------------------------------------------------------------------------------------------- link prediction
def test_link_split_never_leaks_test_edges():
    g = sbm(n=300, p_in=0.05)
    res = graphs.link_split(g, 0.5, np.random.default_rng(0))
    pos = res.pairs[res.pair_labels == 1]
    neg = res.pairs[res.pair_labels == 0]
    assert len(pos) == len(neg) == int(round(0.5 * len(g.edges()))) or len(pos) == len(neg)
    assert np.asarray(res.adjacency[pos[:, 0], pos[:, 1]]).sum() == 0          # held out: not in the residual graph
    assert np.asarray(g.adjacency[pos[:, 0], pos[:, 1]]).min() == 1
    assert np.asarray(g.adjacency[neg[:, 0], neg[:, 1]]).sum() == 0            # negatives: non-edges of the full graph
    assert (neg[:, 0] != neg[:, 1]).all() and len(np.unique(neg, axis=0)) == len(neg)
    assert csgraph.connected_components(res.adjacency)[0] == csgraph.connected_components(g.adjacency)[0]
    assert res.counts["edges"] + len(pos) == len(g.edges())


def test_link_holdout_zero_tests_every_edge_on_the_full_graph():
    g = sbm(n=300, p_in=0.05)
    res = graphs.link_split(g, 0, np.random.default_rng(0))
    assert (res.adjacency != g.adjacency).nnz == 0 and res.counts["edges"] == len(g.edges())  # nothing held out
    pos = res.pairs[res.pair_labels == 1]
    neg = res.pairs[res.pair_labels == 0]
    assert np.array_equal(pos, g.edges())                                        # positives: exactly all edges
    assert len(neg) == len(pos)                                                  # balanced
    assert np.asarray(g.adjacency[neg[:, 0], neg[:, 1]]).sum() == 0              # negatives: non-edges
    assert (neg[:, 0] < neg[:, 1]).all() and len(np.unique(neg, axis=0)) == len(neg)
    again = graphs.link_split(g, 0, np.random.default_rng(0))
    assert np.array_equal(again.pairs, res.pairs)                                # seeded: the same pairs


@pytest.mark.parametrize("value,ok", [(0, True), (0.0, True), (0.5, True), (0.99, True), (1, False), (1.0, False),
                                      (-0.1, False), ("0.5", False), (None, False), (True, False),
                                      (float("nan"), False)])
def test_link_holdout_validation_allows_zero_to_below_one(value, ok):
    from privfair_cli.errors import ConfigError

    if ok:
        graphs.validate({"link_holdout": value})
    else:
        with pytest.raises(ConfigError, match=r"data.link_holdout=.* must be in \[0, 1\)"):
            graphs.validate({"link_holdout": value})


@pytest.mark.parametrize("holdout", [0, 0.5])
def test_link_holdout_zero_is_flagged_in_the_split_warnings(holdout):
    from privfair_cli.datasets import Table, split_warnings

    g = sbm(n=120)
    tab = Table("sbm", np.zeros((g.n, 0)), np.zeros(g.n, np.int64), None, [], meta={"graph": g})
    train, test = graphs.split(tab, {"task": "link_prediction", "link_holdout": holdout}, np.random.default_rng(0))
    warned = split_warnings(train, test, "embedding")
    assert warned == ([graphs.NO_HOLDOUT] if holdout == 0 else [])
    assert all("tested on edges the embedding saw" in w for w in warned)


# ---------------------------------------------------------------------------------------------- end to end
@needs_data("cora")
def test_run_end_to_end_link_prediction(tmp_path, monkeypatch):
    from privfair_cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRIVFAIR_PROGRESS", "off")
    assert main(["run", "algo=dpne", "data=cora", "algo.k=16", "algo.epochs=1", "data.task=link_prediction",
                 "data.eval_splits=2"]) == 0
    run = next(tmp_path.glob("results/runs/dpne/cora/*/seed=0*"))
    record = json.loads((run / "metrics.json").read_text())
    assert 0.5 < record["metrics"]["link_prediction_accuracy"] <= 1.0
    assert record["guarantee"] == "heuristic" and record["warnings"]
    assert record["privacy"]["ledger"][0]["sensitivity"] == pytest.approx(math.sqrt(2))
    assert np.load(run / "artifacts" / "embedding.npy").shape == (2708, 16)
    assert np.array_equal(np.load(run / "artifacts" / "node_ids.npy"), np.arange(2708))
    assert not any("link_holdout" in w for w in record["warnings"])  # the default holds edges out: no such flag


@needs_data("cora")
def test_run_without_holdout_records_the_flag(tmp_path, monkeypatch):
    from privfair_cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRIVFAIR_PROGRESS", "off")
    assert main(["run", "algo=nemf", "data=cora", "algo.k=16", "algo.epochs=1", "data.task=link_prediction",
                 "data.eval_splits=2", "data.link_holdout=0"]) == 0
    run = next(tmp_path.glob("results/runs/nemf/cora/*/seed=0*"))
    record = json.loads((run / "metrics.json").read_text())
    assert 0.5 < record["metrics"]["link_prediction_accuracy"] <= 1.0
    assert graphs.NO_HOLDOUT in record["warnings"]


@pytest.mark.parametrize("model,classes", [("svm", 5), ("svm", 2), ("lr", 2)])
def test_batched_split_accuracy_matches_scikit_learn(model, classes):
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    from privfair_cli.evaluate import _accuracy_over_splits

    rng = np.random.default_rng(0)
    y = rng.integers(0, classes, 600)
    X = rng.normal(0, 1, (600, 8)) + 0.8 * np.eye(classes, 8)[y]
    ours = _accuracy_over_splits(X, y, 0.2, 4, model, np.random.default_rng(5))
    draws, n_train, ref = np.random.default_rng(5), 120, []
    for _ in range(4):  # the same splits, one scikit-learn fit each
        perm = draws.permutation(600)
        clf = (LinearSVC(C=1.0, tol=1e-8, max_iter=100000) if model == "svm"
               else LogisticRegression(C=1.0, tol=1e-10, max_iter=10000))
        ref.append(np.mean(clf.fit(X[perm[:n_train]], y[perm[:n_train]]).predict(X[perm[n_train:]])
                           == y[perm[n_train:]]))
    assert ours == pytest.approx(float(np.mean(ref)), abs=2 / 480)  # at most a couple of borderline predictions
