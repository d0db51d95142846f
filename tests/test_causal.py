"""Causal discovery family (privpc.md): CI tests against scipy, the PC skeleton against causal-learn, PrivPC's
limit, the exponential mechanism's frequencies, the Laplace noise scales, both metric readings, the typed configs,
the guarantees, the reference-graph cache, and every learner on every graph dataset."""

from __future__ import annotations

import hashlib
import itertools
import json

import numpy as np
import pytest
from scipy import stats

from privfair_cli import evaluate, metrics, registry
from privfair_cli.algorithms import causal, citests
from privfair_cli.datasets import synthetic_categorical, synthetic_gaussian
from privfair_cli.errors import ConfigError, DataError
from privfair_cli.privacy import Budget, PrivacyLedger
from privfair_cli.privacy.mechanisms import exponential, exponential_probabilities
from tests.conftest import fit, require_data
from tests.conftest import table as split_table


def categorical_data(seed, p=6, s=0.3, n=5000, low=2, high=4):
    card = {"name": "t", "p": p, "s": s, "n": n, "cats": {"low": low, "high": high}}
    table = synthetic_categorical.generate(card, np.random.default_rng(seed))
    return table, table.frame.to_numpy(), np.array([table.domain[c] for c in table.frame.columns])


def gaussian_data(seed, p=8, s=0.3, n=2000):
    rng = np.random.default_rng(seed)
    W = synthetic_gaussian.random_dag(p, s, rng)
    return W, synthetic_gaussian.sample_linear_gaussian(W, n, rng)


# ---------------------------------------------------------------------------------------------- CI tests
def test_g2_and_chi2_match_scipy_on_two_way_tables():
    rng = np.random.default_rng(0)
    codes = np.column_stack([rng.integers(0, 3, 400), rng.integers(0, 4, 400)])
    codes[:150, 1] = codes[:150, 0]  # some dependence
    obs = np.zeros((3, 4))
    np.add.at(obs, (codes[:, 0], codes[:, 1]), 1)
    for stat, lam in (("g2", "log-likelihood"), ("chi2", "pearson")):
        ref_stat, ref_p, ref_df, _ = stats.chi2_contingency(obs, correction=False, lambda_=lam)
        for dense_cells in (None, 0):  # exact-shape tables, and the observed-cells path
            test = citests.GSquare(codes, [3, 4], stat, n_min_factor=0, dense_cells=dense_cells)
            none = np.zeros((1, 0), int)
            statistic, df = test.statistics(np.array([0]), np.array([1]), none)
            assert statistic[0] == pytest.approx(ref_stat, rel=1e-10) and df[0] == ref_df
            assert test.pvalues([0], [1], none)[0] == pytest.approx(ref_p, rel=1e-8)


def test_conditional_g2_is_the_sum_over_strata_of_scipy_g2():
    table, codes, cats = categorical_data(1, p=5, n=3000)
    test = citests.GSquare(codes, cats, "g2", n_min_factor=0)
    for x, y, z in [(0, 1, 2), (3, 4, 0), (1, 3, 4)]:
        strata = [codes[codes[:, z] == v] for v in range(cats[z])]
        g2 = 0.0
        for rows in strata:
            obs = np.zeros((cats[x], cats[y]))
            np.add.at(obs, (rows[:, x], rows[:, y]), 1)
            obs = obs[obs.sum(1) > 0][:, obs.sum(0) > 0]
            if min(obs.shape) > 1:
                g2 += stats.chi2_contingency(obs, correction=False, lambda_="log-likelihood")[0]
        df = (cats[x] - 1) * (cats[y] - 1) * cats[z]
        got = test.pvalues(np.array([x]), np.array([y]), np.array([[z]]))[0]
        assert got == pytest.approx(stats.chi2.sf(g2, df), rel=1e-8, abs=1e-300)


def test_small_sample_rule_returns_pvalue_one():
    _, codes, cats = categorical_data(2, p=5, n=300, low=4, high=4)  # df at order 2 = 9 * 16 = 144 -> n_min 1440
    test = citests.GSquare(codes, cats, "g2", n_min_factor=10)
    S = np.array([[2, 3]])
    assert test.pvalues(np.array([0]), np.array([1]), S)[0] == 1.0
    assert citests.GSquare(codes, cats, "g2", n_min_factor=0).pvalues(np.array([0]), np.array([1]), S)[0] < 1


def test_fisher_z_matches_regression_residuals_and_scipy():
    _, X = gaussian_data(3, p=6, n=500)
    test = citests.FisherZ(np.corrcoef(X, rowvar=False), len(X))
    for x, y, S in [(0, 1, ()), (0, 5, (2,)), (1, 4, (0, 2)), (2, 3, (0, 1, 5))]:
        Z = np.column_stack([np.ones(len(X)), X[:, list(S)]])
        res = [X[:, v] - Z @ np.linalg.lstsq(Z, X[:, v], rcond=None)[0] for v in (x, y)]
        r = stats.pearsonr(*res).statistic
        z = np.sqrt(len(X) - len(S) - 3) * np.arctanh(r)
        got = test.pvalues(np.array([x]), np.array([y]), np.array([S], dtype=int).reshape(1, -1))[0]
        assert got == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-6)


def test_nan_correlation_means_independence():
    C = np.eye(3)
    C[0, 1] = C[1, 0] = np.nan
    test = citests.FisherZ(C, 100)
    assert test.pvalues(np.array([0]), np.array([1]), np.zeros((1, 0), int))[0] == pytest.approx(1.0)
    assert test.pvalues(np.array([0]), np.array([1]), np.array([[2]]))[0] == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------- PC core
def test_subsets_in_lexicographic_order():
    assert causal.subsets(5, 3).tolist() == [list(c) for c in itertools.combinations(range(5), 3)]
    assert causal.subsets(4, 0).shape == (1, 0)


@pytest.mark.parametrize("seed", [0, 1])
def test_pc_skeleton_equals_causal_learn(seed):
    cl = pytest.importorskip("causallearn.search.ConstraintBased.PC", reason="causal-learn is not installed")
    _, X = gaussian_data(seed, p=10, s=0.3, n=2000)
    ours, _, _ = causal.skeleton(citests.FisherZ(np.corrcoef(X, rowvar=False), len(X)), 0.01)
    theirs = cl.pc(X, 0.01, "fisherz", stable=True, show_progress=False).G.graph != 0
    assert (ours == theirs).all()
    # G^2 with causal-learn's df rule and without the small-sample rule (causal-learn has none)
    _, codes, cats = categorical_data(seed, p=7, s=0.3, n=4000, high=3)
    ours, _, _ = causal.skeleton(citests.GSquare(codes, cats, "g2", 0, "adaptive"), 0.01)
    theirs = cl.pc(codes.astype(float), 0.01, "gsq", stable=True, show_progress=False).G.graph != 0
    assert (ours == theirs).all()


def test_orientation_collider_and_meek_rule_1():
    # 0 -> 2 <- 1, 2 - 3: collider at 2 (2 not in sepset(0, 1)); R1 then orients 2 -> 3.
    adj = np.zeros((4, 4), bool)
    for i, j in [(0, 2), (1, 2), (2, 3)]:
        adj[i, j] = adj[j, i] = True
    sep = {(0, 1): (), (1, 0): (), (0, 3): (2,), (3, 0): (2,), (1, 3): (2,), (3, 1): (2,)}
    A = causal.orient(adj, sep)
    assert A[0, 2] and not A[2, 0] and A[1, 2] and not A[2, 1] and A[2, 3] and not A[3, 2]
    # chain 0 - 2 - 1 with 2 in the sepset stays undirected
    A = causal.orient(adj[:3, :3], {(0, 1): (2,), (1, 0): (2,)})
    assert A[0, 2] and A[2, 0]


# ---------------------------------------------------------------------------------------------- metrics
def test_metric_readings_on_the_adult_counts():
    """Thesis 4.6.3: reference 31 edges, PrivPC 28 edges, 22 shared, p = 14: printed 0.786 / 0.143 / 0.710."""
    pairs = list(zip(*np.triu_indices(14, 1), strict=True))
    true, est = np.zeros((14, 14), int), np.zeros((14, 14), int)
    for i, j in pairs[:31]:
        true[i, j] = 1
    for i, j in pairs[9:37]:
        est[i, j] = 1
    m = metrics.graph_recovery(true, est)
    assert (m["true_edges"], m["num_edges"], m["shared_edges"]) == (31, 28, 22)
    assert m["tpr_pub"] == pytest.approx(0.786, abs=5e-4) and m["tdr_pub"] == pytest.approx(0.710, abs=5e-4)
    assert m["fpr_pub"] == pytest.approx(0.143, abs=5e-4)
    assert m["tpr_textbook"] == m["tdr_pub"] and m["tdr_textbook"] == m["tpr_pub"]
    assert m["fpr_textbook"] == pytest.approx(6 / (91 - 31))
    assert m["fdr_textbook"] == pytest.approx(1 - m["tdr_textbook"])


# ---------------------------------------------------------------------------------------------- privacy
def test_exponential_mechanism_frequencies_match_probabilities():
    scores = causal.q2_scores(np.array([6.0, 2.0, -1.0, -4.0]), np.array([True, True, False, False]))
    assert scores.argmax() == 2  # two neighbours judged independent
    eps, draws = 0.8, 20000
    probs = exponential_probabilities(scores, 1.0, eps)
    rng = np.random.default_rng(11)
    picks = [exponential(scores, 1.0, eps, rng, PrivacyLedger(Budget(eps))) for _ in range(draws)]
    counts = np.bincount(picks, minlength=len(scores))
    keep = probs * draws >= 5
    assert stats.chisquare(counts[keep], probs[keep] / probs[keep].sum() * counts[keep].sum()).pvalue > 1e-3


def test_lapmech_noise_scale_and_ledger():
    _, codes, cats = categorical_data(4, p=4, n=2000)
    eps = 0.5
    ledger = PrivacyLedger(Budget(eps))
    noisy = causal.noisy_contingency_table(codes, cats, eps, np.random.default_rng(5), ledger, 2**20)
    exact = np.zeros(tuple(cats))
    np.add.at(exact, tuple(codes.T), 1)
    noise = (noisy - exact).ravel()
    assert noisy.shape == tuple(cats) and noisy.dtype == np.float32
    assert stats.kstest(noise, stats.laplace(scale=1 / eps).cdf).pvalue > 1e-3
    assert [(e["mechanism"], e["eps"], e["sensitivity"]) for e in ledger.to_dict()["ledger"]] == [
        ("laplace", eps, 1.0)]


def test_lapmech_occupied_noises_only_non_empty_cells_and_claims_no_dp():
    """`noise_cells: occupied` (a diagnostic): Laplace(1/eps) on the non-empty cells, the empty ones exact (zero),
    so the run claims `heuristic`, warns, and says so in its ledger entry."""
    _, codes, cats = categorical_data(4, p=6, n=300)
    eps = 0.5
    ledger = PrivacyLedger(Budget(eps))
    noisy = causal.noisy_contingency_table(codes, cats, eps, np.random.default_rng(5), ledger, 2**20,
                                           occupied_only=True)
    exact = np.zeros(tuple(cats))
    np.add.at(exact, tuple(codes.T), 1)
    assert (noisy[exact == 0] == 0).all() and 0 < (exact > 0).sum() < exact.size
    noise = (noisy - exact)[exact > 0]
    assert stats.kstest(noise, stats.laplace(scale=1 / eps).cdf).pvalue > 1e-3
    (entry,) = ledger.to_dict()["ledger"]
    assert entry["mechanism"] == "laplace" and "not DP" in entry["note"]
    assert registry.make("lapmech", noise_cells="occupied").claims() == "heuristic"
    data = categorical_data(2, p=4, n=500)[0]
    lap, _ = fit("lapmech", data, 5.0, noise_cells="occupied")
    assert any("not differentially private" in w for w in lap.warnings())


def test_privpc_star_noise_uses_the_thesis_sensitivity():
    _, X = gaussian_data(6, p=5, n=200)
    eps = 2.0
    ledger = PrivacyLedger(Budget(eps))
    noisy = causal.noisy_covariance(X, eps, np.random.default_rng(7), ledger)
    assert np.allclose(noisy, noisy.T)
    (entry,) = ledger.to_dict()["ledger"]
    assert entry["sensitivity"] == pytest.approx(5 * 6 / (2 * 199))
    draws = np.array([causal.noisy_covariance(X, eps, np.random.default_rng(s), PrivacyLedger(Budget(eps)))[1, 0]
                      for s in range(2000)]) - np.cov(X, rowvar=False)[1, 0]
    assert stats.kstest(draws, stats.laplace(scale=entry["sensitivity"] / eps).cdf).pvalue > 1e-3


def test_privpc_star_clips_rows_by_default_and_flags_raw_rows():
    _, X = gaussian_data(3, p=5, n=400)
    X = 3 * X  # most raw rows exceed the proof's bound ||x|| <= sqrt(p)
    clipped = X / np.maximum(1.0, np.linalg.norm(X, axis=1) / np.sqrt(5))[:, None]
    assert (np.linalg.norm(X, axis=1) > np.sqrt(5)).mean() > 0.5
    assert (np.linalg.norm(clipped, axis=1) <= np.sqrt(5) * (1 + 1e-12)).all()
    eps = 50.0
    ledger = PrivacyLedger(Budget(eps))
    rho = causal.noisy_correlation(X, eps, np.random.default_rng(4), ledger, row_clip=True)
    cov = causal.noisy_covariance(clipped, eps, np.random.default_rng(4), PrivacyLedger(Budget(eps)))
    with np.errstate(invalid="ignore"):
        expected = cov / np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
    np.fill_diagonal(expected, 1.0)
    np.testing.assert_allclose(rho, expected)
    assert "not formally private" not in ledger.to_dict()["ledger"][0]["note"]
    data = synthetic_gaussian.generate({"name": "g", "p": 5, "s": 0.4, "n": 300}, np.random.default_rng(1))
    private, _ = fit("privpc_star", data, 1.0)
    raw, raw_ledger = fit("privpc_star", data, 1.0, row_clip=False)
    assert private.extra_metrics()["rows_clipped"] == 1.0 and raw.extra_metrics()["rows_clipped"] == 0.0
    assert "not formally private" in raw_ledger.to_dict()["ledger"][0]["note"]
    assert private.warnings() == [] and any("row_clip=false" in w for w in raw.warnings())


def test_privpc_star_published_sensitivity_is_too_small_even_for_clipped_rows():
    """Why privpc_star claims `heuristic`: n rows x = (1, ..., 1) (||x||^2 = p, the proof's bound) and one added
    row -x move the lower triangle of the covariance by 2 p (p + 1) / (n + 1) in L1, about 4 times the thesis'
    sensitivity p (p + 1) / (2 (n - 1)) (its proof drops the change of the mean, privpc.md §5.7)."""
    p, n = 5, 200
    D = np.ones((n, p))
    D2 = np.vstack([D, -np.ones((1, p))])
    lower = np.tril_indices(p)
    change = np.abs(np.cov(D2, rowvar=False)[lower] - np.cov(D, rowvar=False)[lower]).sum()
    assert change == pytest.approx(2 * p * (p + 1) / (n + 1))
    assert change > 3.9 * p * (p + 1) / (2 * (n - 1))


def test_guarantees_claimed():
    assert {name: registry.make(name).claims() for name in ("pc", "lapmech", "privpc", "privpc_star")} == {
        "pc": "none", "lapmech": "eps-DP", "privpc": "heuristic", "privpc_star": "heuristic"}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_privpc_at_large_eps_returns_the_pc_skeleton(seed):
    data, _, _ = categorical_data(seed, p=6, s=0.3, n=8000)
    pc, _ = fit("pc", data, 1.0)
    priv, ledger = fit("privpc", data, 1e9, max_order=2)
    assert (priv.adjacency == pc.adjacency).all()
    # every round is charged to the ledger, once, at eps_r: eps2 for beta_hat and eps1 for the selections
    rounds, eps_r = priv.stats["privpc_rounds"], priv.stats["eps_per_round"]
    assert rounds > 0 and eps_r == pytest.approx(1e9 / (6 * 3))
    assert ledger.spent()[0] == pytest.approx(rounds * eps_r, rel=1e-12)
    assert sum(e["note"].startswith("privpc beta_hat") for e in ledger.to_dict()["ledger"]) == rounds


def test_privpc_at_eps_inf_is_the_noise_free_limit():
    data, _, _ = categorical_data(1, p=6, s=0.3, n=8000)
    priv, ledger = fit("privpc", data, float("inf"), max_order=2)
    assert (priv.adjacency == fit("pc", data)[0].adjacency).all() and priv.stats["privpc_rounds"] > 0


def test_privpc_budget_schedule():
    data, _, _ = categorical_data(8, p=6, s=0.3, n=3000)
    eps = 1.0
    priv, ledger = fit("privpc", data, eps, max_order=2)
    rounds = priv.stats["privpc_rounds"]
    assert priv.stats["eps_per_round"] == pytest.approx(eps / (6 * 3))
    assert ledger.spent()[0] == pytest.approx(rounds * eps / 18) and ledger.spent()[0] <= eps
    assert {e["mechanism"] for e in ledger.to_dict()["ledger"]} == {"exponential"}
    assert priv.warnings() == []


def test_privpc_fixed_round_budget_stops_at_the_ledger_and_refuses_a_round_above_eps():
    data, _, _ = categorical_data(8, p=6, s=0.3, n=3000)
    priv, ledger = fit("privpc", data, 1.0, round_budget="fixed:0.3")
    assert priv.stats["privpc_rounds"] == 3 and ledger.spent()[0] == pytest.approx(0.9)
    assert any("ran out after 3 rounds" in w for w in priv.warnings())
    with pytest.raises(ConfigError, match="costs more than eps=1 per round"):
        fit("privpc", data, 1.0, round_budget="fixed:5")
    with pytest.raises(ConfigError, match="round_budget='fixed:-1' is not allowed"):
        registry.make("privpc", round_budget="fixed:-1")


def _g2(N: np.ndarray) -> np.ndarray:
    """G^2 of 2 x 2 tables N (..., 2, 2), written out."""
    hN = citests.h(N)
    return 2 * (hN.sum((-2, -1)) - citests.h(N.sum(-1)).sum(-1) - citests.h(N.sum(-2)).sum(-1)
                + citests.h(N.sum((-2, -1))))


def test_distance_score_sign_and_greedy_upper_bound():
    """Near the boundary the greedy count is at least the exact minimum found by breadth-first search."""
    codes = np.array([[0, 0]] * 30 + [[0, 1]] * 20 + [[1, 0]] * 20 + [[1, 1]] * 26)
    test = citests.GSquare(codes, [2, 2], "g2", n_min_factor=0)
    none = np.zeros((1, 0), int)
    d = citests.distance_scores(test, np.array([0]), np.array([1]), none, 0.01, d_max=50)[0]
    N0 = test.exact_tables(np.array([0]), np.array([1]), none).counts.reshape(2, 2)
    crit = stats.chi2.isf(0.01, 1)
    indep = _g2(N0) < crit
    assert (d >= 0) == indep
    frontier, k = {tuple(N0.ravel())}, 0
    while True:  # exact k*: fewest +-1 cell changes that flip the decision
        k += 1
        frontier = {tuple(np.add(t, m)) for t in frontier for m in np.vstack([np.eye(4), -np.eye(4)])
                    if min(np.add(t, m)) >= 0}
        g = _g2(np.array(list(frontier)).reshape(-1, 2, 2))
        if ((g < crit) != indep).any():
            break
    assert abs(d) >= k - 1


def test_distance_scores_follow_the_greedy_rule_step_by_step():
    """The incremental search equals the greedy rule of privpc.md §3.4 recomputed from scratch at every step
    (every cell, both moves, the first largest signed change), on tables of mixed shapes."""
    data, codes, cats = categorical_data(5, p=6, n=1500, low=2, high=4)
    test = citests.GSquare(codes, cats, "g2", n_min_factor=0)
    x, y, S = np.array([0, 1, 2, 3]), np.array([4, 5, 0, 1]), np.array([[1], [2], [5], [4]])
    got = citests.distance_scores(test, x, y, S, 0.01, d_max=40)
    crit = stats.chi2.isf(0.01, test.df(x, y, S))

    def g2(N):  # one stratified table (K, A, B)
        return 2 * (citests.h(N).sum() - citests.h(N.sum(2)).sum() - citests.h(N.sum(1)).sum()
                    + citests.h(N.sum((1, 2))).sum())

    for t in range(len(x)):
        N = test.exact_tables(x[t:t + 1], y[t:t + 1], S[t:t + 1]).counts.reshape(cats[S[t, 0]], cats[x[t]], cats[y[t]])
        sign, steps = (1.0 if g2(N) < crit[t] else -1.0), 40
        for step in range(40):
            moves = [(sign * (g2(N + delta * e) - g2(N)), -m, delta, c) for m, delta in enumerate((1, -1))
                     for c, e in enumerate(np.eye(N.size).reshape(-1, *N.shape)) if delta > 0 or N.ravel()[c] > 0]
            gain, _, delta, c = max(moves, key=lambda mv: (mv[0], mv[1], -mv[3]))
            if (sign > 0 and g2(N) + sign * gain >= crit[t]) or (sign < 0 and g2(N) + sign * gain < crit[t]):
                steps = step
                break
            N = N + delta * np.eye(N.size)[c].reshape(N.shape)
        assert got[t] == sign * steps


def test_synthetic_data_depend_on_the_data_stream_only():
    card = {"name": "synthetic_categorical", "p": 5, "s": 0.4, "n": 100}
    a = synthetic_categorical.generate(card, np.random.default_rng(3))
    b = synthetic_categorical.generate(card, np.random.default_rng(3))
    assert a.frame.equals(b.frame) and (a.meta["true_adjacency"] == b.meta["true_adjacency"]).all()
    assert a.meta["true_adjacency"].sum() == 4  # round(0.4 * 10) edges, exact
    A = a.meta["true_adjacency"]
    assert not np.linalg.matrix_power(A.astype(float), 5).any()  # nilpotent: acyclic


@pytest.mark.parametrize("stat", ["g2", "chi2"])
def test_sparse_high_order_statistics_equal_dense_tables(stat):
    _, codes, cats = categorical_data(9, p=8, n=3000, high=5)
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 2, 40), rng.integers(2, 4, 40)
    S = np.array([rng.choice(np.arange(4, 8), 3, replace=False) for _ in range(40)])
    for df in ("fixed", "adaptive"):
        dense = citests.GSquare(codes, cats, stat, 0, df, dense_cells=10**9).statistics(x, y, S)
        sparse = citests.GSquare(codes, cats, stat, 0, df, dense_cells=0).statistics(x, y, S)
        assert np.allclose(dense[0], sparse[0]) and np.allclose(dense[1], sparse[1])


def test_exact_tables_equal_a_record_by_record_count_in_any_chunking(monkeypatch):
    _, codes, cats = categorical_data(4, p=8, n=1500, high=5)
    rng = np.random.default_rng(5)
    for order in range(5):
        T = 23
        x = rng.integers(0, 8, T)
        y = (x + 1 + rng.integers(0, 7, T)) % 8
        S = np.array([rng.choice(np.setdiff1d(np.arange(8), [a, b]), order, replace=False)
                      for a, b in zip(x, y, strict=True)]).reshape(T, order)
        expected = []
        for t in range(T):  # strata: the first conditioning variable least significant
            N = np.zeros((*cats[S[t]][::-1], cats[x[t]], cats[y[t]]))
            np.add.at(N, (*(codes[:, v] for v in S[t][::-1]), codes[:, x[t]], codes[:, y[t]]), 1)
            expected.append(N.ravel())
        # all tests in one chunk; 2 tests a chunk (the last one partial); one test a chunk with int64 keys
        for chunk, int32_cells in ((1 << 18, 2**31), (4000, 2**31), (1, 0)):
            monkeypatch.setattr(citests.GSquare, "CHUNK_RECORDS", chunk)
            monkeypatch.setattr(citests.GSquare, "INT32_CELLS", int32_cells)
            got = citests.GSquare(codes, cats, "g2", 0).exact_tables(x, y, S).counts
            assert np.array_equal(got, np.concatenate(expected)), (order, chunk)


# Skeletons as computed before the G^2 counting was rewritten: edges, distinct CI tests, and the first 16 hex digits
# of the sha256 of (edges, separating sets, test counts). The causal tables' reproductions rest on these results.
PINNED_SKELETONS = {
    ("g2 adaptive", 0): (11, 157, "74427f0cf51c4278"), ("g2 fixed", 0): (11, 157, "74427f0cf51c4278"),
    ("chi2 fixed", 0): (11, 157, "74427f0cf51c4278"), ("privpc", 0): (9, 141, "21cb0785f5d4621a"),
    ("g2 adaptive", 1): (9, 154, "3bf638b51fecf3b0"), ("g2 fixed", 1): (9, 153, "425e858ff3cd70dd"),
    ("chi2 fixed", 1): (10, 149, "a2581890d9a51b09"), ("privpc", 1): (8, 124, "2373526109e4ee01"),
    ("g2 adaptive", 2): (8, 108, "e7a8f031b87f1166"), ("g2 fixed", 2): (6, 108, "2af6acdbce9d0241"),
    ("chi2 fixed", 2): (6, 108, "2af6acdbce9d0241"), ("privpc", 2): (8, 84, "0c4a7738ebb3781c"),
}


def skeleton_fingerprint(adj, sepset, stats) -> tuple[int, int, str]:
    edges = np.argwhere(np.triu(adj, 1)).tolist()
    seps = sorted([int(i), int(j), list(S)] for (i, j), S in sepset.items() if i < j)
    counts = {k: int(v) for k, v in stats.items() if k in ("ci_tests", "privpc_rounds", "max_order_reached")}
    digest = hashlib.sha256(json.dumps([edges, seps, counts]).encode()).hexdigest()[:16]
    return len(edges), counts["ci_tests"], digest


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_skeletons_separating_sets_and_test_counts_are_pinned(seed):
    table, codes, cats = categorical_data(seed, p=10, s=0.3, n=3000, high=5)
    for name, test in (("g2 adaptive", citests.GSquare(codes, cats, "g2", 0, "adaptive")),
                       ("g2 fixed", citests.GSquare(codes, cats, "g2", 10)),
                       ("chi2 fixed", citests.GSquare(codes, cats, "chi2", 10))):
        assert skeleton_fingerprint(*causal.skeleton(test, 0.01)) == PINNED_SKELETONS[(name, seed)], name
    plugin = registry.make("privpc", max_order=2)
    plugin.fit(table, Budget(5.0), PrivacyLedger(Budget(5.0)), np.random.default_rng(seed))
    assert skeleton_fingerprint(plugin.adjacency, plugin.sepset, plugin.stats) == PINNED_SKELETONS[("privpc", seed)]


def test_graph_runs_report_the_core_metrics_consistently():
    rng = np.random.default_rng(3)
    true = np.triu(rng.random((8, 8)) < 0.3, 1).astype(int)
    est = np.triu(rng.random((8, 8)) < 0.3, 1).astype(int)
    m = metrics.graph_recovery(true, est)
    for core, textbook in (("edge_tpr", "tpr_textbook"), ("edge_fpr", "fpr_textbook"), ("edge_tdr", "tdr_textbook"),
                           ("edge_fdr", "fdr_textbook")):
        assert m[core] == pytest.approx(m[textbook])
    assert m["shd"] == m["true_edges"] + m["num_edges"] - 2 * m["shared_edges"]


# ---------------------------------------------------------------------------------------------- lapmech's test
@pytest.mark.parametrize("stat", ["g2", "chi2"])
def test_noisy_table_statistic_is_the_statistic_of_the_clipped_marginal(stat):
    rng = np.random.default_rng(3)
    noisy = (rng.poisson(3.0, (2, 3, 4, 2, 3)) + rng.laplace(0, 2.0, (2, 3, 4, 2, 3))).astype(np.float32)
    test = citests.NoisyTableGSquare(noisy, 500, stat, n_min_factor=0)
    x, y, S = np.array([0, 2, 4, 1]), np.array([1, 4, 0, 3]), np.array([[2, 3], [1, 3], [3, 1], [4, 0]])
    got, df = test.statistics(x, y, S)
    for t in range(len(x)):
        rest = tuple(v for v in range(5) if v not in (x[t], y[t], *S[t]))
        N = np.clip(noisy.astype(np.float64).sum(axis=rest), 0, None)  # axes: the kept variables, ascending
        kept = sorted((x[t], y[t], *S[t]))
        N = N.transpose([kept.index(v) for v in (*S[t], x[t], y[t])]).reshape(-1, noisy.shape[x[t]], noisy.shape[y[t]])
        if stat == "g2":
            want = 2 * (citests.h(N).sum() - citests.h(N.sum(2)).sum() - citests.h(N.sum(1)).sum()
                        + citests.h(N.sum((1, 2))).sum())
        else:
            want = citests.chi2_statistic(N[None])[0]
        assert got[t] == pytest.approx(want, rel=1e-9)
    assert (df == test.df(x, y, S)).all()


# ---------------------------------------------------------------------------------------------- configs
@pytest.mark.parametrize("name", ["pc", "lapmech", "privpc", "privpc_star"])
def test_typed_configs_take_their_defaults_from_the_yaml_only(name):
    plugin = registry.make(name)
    assert type(plugin).Config is not None and plugin.cfg.tau == 0.01
    with pytest.raises(ConfigError, match="algo.tau=1.5 is out of range"):
        registry.make(name, tau=1.5)
    with pytest.raises(ConfigError, match="algo.distance is not a key of algo"):
        registry.make(name, distance="greedy")


# ---------------------------------------------------------------------------------------------- evaluation
def test_graph_evaluator_caches_the_reference_graph(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path))
    data, _, _ = categorical_data(4, p=6, s=0.3, n=3000)
    data.meta.pop("true_adjacency")  # data without a generating graph, as Adult
    priv, _ = fit("privpc", data, 5.0)
    first = evaluate.graph(priv, data, None, None)
    reference = priv.reference_graph(data)
    assert (priv.reference_adjacency == reference).all()
    assert first["true_edges"] == reference.sum() // 2
    assert len(list((tmp_path / "reference").glob("*.npy"))) == 1
    monkeypatch.setattr(type(priv), "reference_graph", lambda self, d: pytest.fail("recomputed"))
    assert evaluate.graph(priv, data, None, None) == first
    lap, _ = fit("lapmech", data, 5.0, n_min_factor=5)  # other reference settings: another entry
    monkeypatch.undo()
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path))
    evaluate.graph(lap, data, None, None)
    assert len(list((tmp_path / "reference").glob("*.npy"))) == 2


def test_pc_without_a_generating_graph_is_its_own_reference_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path))
    data, _, _ = categorical_data(4, p=6, s=0.3, n=3000)
    data.meta.pop("true_adjacency")
    pc, _ = fit("pc", data)
    m = evaluate.graph(pc, data, None, None)
    assert m["edge_tpr"] == 1 and m["edge_fpr"] == 0
    assert any("reference graph is pc itself" in w for w in pc.warnings())
    with_truth, _, _ = categorical_data(4, p=6, s=0.3, n=3000)
    assert fit("pc", with_truth)[0].warnings() == []


GRAPH_DATA = {"synthetic_categorical": {"n": 1500, "p": 6}, "synthetic_gaussian": {"n": 1500, "p": 6},
              "adult_pc": {"n": 2000}, "adult": {"n": 2000}}
REFUSED = {("lapmech", "synthetic_gaussian"): r"a G\^2 test needs a categorical dataset",
           ("privpc", "synthetic_gaussian"): r"a G\^2 test needs a categorical dataset",
           ("lapmech", "adult"): "cells > algo.max_cells"}  # Adult's discrete view has 100-bin attributes


SLOW = {("lapmech", "adult_pc"), ("privpc", "adult_pc"), ("privpc", "adult")}  # 5-10 s each on 2 shared cores


@pytest.mark.parametrize(("algo", "data_name"), [
    pytest.param(a, d, marks=[pytest.mark.slow] if (a, d) in SLOW else [])
    for a in ("pc", "lapmech", "privpc", "privpc_star") for d in GRAPH_DATA])
def test_every_learner_runs_with_defaults_on_every_graph_dataset(algo, data_name, tmp_path, monkeypatch):
    """Defaults, eps = 1: a complete result, or the one-line refusal where the pair is impossible."""
    if data_name.startswith("adult"):
        require_data("adult")
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path))
    data, test = split_table(data_name, **GRAPH_DATA[data_name])
    if (algo, data_name) in REFUSED:
        with pytest.raises(DataError, match=REFUSED[algo, data_name]):
            fit(algo, data)
        return
    plugin, ledger = fit(algo, data)
    m = evaluate.graph(plugin, data, test, None)
    p = len(plugin.names)
    assert plugin.adjacency.shape == (p, p) and m["num_edges"] == plugin.adjacency.sum() // 2
    assert 0 <= m["tpr_pub"] <= 1 and 0 <= m["tdr_pub"] <= 1
    assert ledger.spent()[0] <= 1.0 and (ledger.spent()[0] > 0) == (algo != "pc")


def test_learners_with_the_same_test_share_one_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path))
    data, _, _ = categorical_data(4, p=6, s=0.3, n=3000)
    data.meta.pop("true_adjacency")
    pc, _ = fit("pc", data, max_order=1)  # capped: its reference is computed, not its own graph
    evaluate.graph(pc, data, None, None)
    priv, _ = fit("privpc", data, 5.0)
    monkeypatch.setattr(type(priv), "reference_graph", lambda self, d: pytest.fail("recomputed"))
    assert (evaluate.graph(priv, data, None, None)["true_edges"] == fit("pc", data)[0].adjacency.sum() // 2)


# ------------------------------------------------------------------------------------------ TETRAD's generator
def test_tetrad_cpt_rows_follow_get_random_weights3():
    """MlBayesIm RANDOM rows (TETRAD 6): weight w = 3v if v > 0.5 else v, v ~ U(0, 1), then normalised. The
    unnormalised weight's distribution: P(w <= 0.5) = 1/2, and above 1.5 it is uniform on (1.5, 3]; a k = 2 row's
    first probability is w1 / (w1 + w2), checked against a direct simulation of the rule with scipy's KS test."""
    rng = np.random.default_rng(0)
    rows = synthetic_categorical.tetrad_cpt_rows(2, 20000, rng)
    np.testing.assert_allclose(rows.sum(1), 1.0)
    v = np.random.default_rng(1).random((20000, 2))
    w = np.where(v > 0.5, 3 * v, v)
    assert stats.ks_2samp(rows[:, 0], w[:, 0] / w.sum(1)).pvalue > 1e-3
    # the jump at v = 0.5 (weights in (0.5, 1.5) never occur) makes lopsided rows more likely than U(0,1) weights
    uniform = synthetic_categorical.cpt_rows(2, 20000, "uniform_normalised", np.random.default_rng(2))
    assert np.mean(np.abs(rows[:, 0] - 0.5) > 0.3) > np.mean(np.abs(uniform[:, 0] - 0.5) > 0.3) + 0.05


def test_tetrad_categories_follow_the_redrawn_loop_bound():
    """BayesPm.setNewValues: `for (i = 0; i < pickNumVals(2, 5); i++)` redraws its bound at every test, so a node
    has 2, 3, 4, 5 categories with probabilities 1/4, 3/8, 9/32, 3/32 (not 1/4 each)."""
    k = synthetic_categorical.tetrad_categories(2, 5, 40000, np.random.default_rng(3))
    counts = np.bincount(k, minlength=6)[2:]
    assert counts.sum() == 40000
    assert stats.chisquare(counts, 40000 * np.array([8, 12, 9, 3]) / 32).pvalue > 1e-3
    assert (synthetic_categorical.tetrad_categories(3, 3, 50, np.random.default_rng(0)) == 3).all()


def test_tetrad_forward_dag_is_acyclic_capped_and_stops_after_twice_the_edges():
    rng = np.random.default_rng(0)
    for _ in range(50):
        A = synthetic_categorical.tetrad_forward_dag(8, 12, rng, max_indegree=2, max_outdegree=3, max_degree=4)
        assert len(synthetic_categorical.topological_order(A)) == 8  # acyclic
        assert A.sum() <= 12 and A.sum(0).max() <= 2 and A.sum(1).max() <= 3 and (A.sum(0) + A.sum(1)).max() <= 4
        assert not np.any(A & A.T)
    # a complete graph requested on 5 nodes: 20 draws for 10 edges, so TETRAD's loop often ends short of it
    drawn = [synthetic_categorical.tetrad_forward_dag(5, 10, rng).sum() for _ in range(200)]
    assert max(drawn) <= 10 and np.mean(drawn) < 9.5
    # without caps and a sparse request every requested edge is drawn
    assert all(synthetic_categorical.tetrad_forward_dag(10, 9, rng).sum() == 9 for _ in range(20))


def test_generator_tetrad_end_to_end_and_unknown_generator():
    card = {"name": "synthetic_categorical", "p": 6, "s": 0.4, "n": 500, "generator": "tetrad"}
    table = synthetic_categorical.generate(card, np.random.default_rng(0))
    assert table.meta["generator"] == "tetrad" and table.meta["edges_requested"] == 6
    assert table.meta["edges_drawn"] == table.meta["true_adjacency"].sum() <= 6
    assert table.frame.shape == (500, 6)
    assert all(table.frame[c].max() < table.domain[c] for c in table.frame.columns)
    with pytest.raises(ConfigError, match="data.generator='gibbs' is unknown; allowed: standin, tetrad"):
        synthetic_categorical.generate(card | {"generator": "gibbs"}, np.random.default_rng(0))
