"""FES family (fair_sampling.md): the shared Kamiran-Calders samplers, the batched base learners, the
semi-supervised split and the four plugins."""

from __future__ import annotations

import numpy as np
import pytest

from privfair_cli import datasets, evaluate, metrics
from privfair_cli.algorithms import batched_linear, kamiran_calders
from tests.conftest import fit, table


def biased(n=2000, seed=0):
    """s and y dependent: P(y=1 | s=1) = 0.6, P(y=1 | s=0) = 0.2; one feature that tracks y."""
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.55).astype(int)
    y = (rng.random(n) < np.where(s == 1, 0.6, 0.2)).astype(int)
    return s, y, rng


def test_uniform_makes_s_and_y_independent():
    s, y, rng = biased()
    idx = kamiran_calders.uniform(s, y, rng)
    exp = kamiran_calders.expected_sizes(s, y)
    got = metrics.group_counts(s[idx], y[idx])  # (z=s here) counts of the re-sampled table
    want = {metrics.GROUP_NAMES[g]: int(np.floor(e + 0.5)) for g, e in exp.items()}
    assert got == want
    rate = [y[idx][s[idx] == a].mean() for a in (0, 1)]
    assert abs(rate[0] - rate[1]) < 2 / min(np.bincount(s))  # independent up to rounding of E


def test_expected_sizes_agree_with_aif360_reweighing():
    """AIF360's Reweighing weight of a row is E(s, y) / |G(s, y)|: weight x |G| summed per group = E."""
    aif = pytest.importorskip("aif360.algorithms.preprocessing")
    import pandas as pd
    from aif360.datasets import BinaryLabelDataset

    s, y, _ = biased(600, seed=3)
    df = pd.DataFrame({"x": np.arange(len(y), dtype=float), "s": s, "y": y})
    ds = BinaryLabelDataset(df=df, label_names=["y"], protected_attribute_names=["s"])
    out = aif.Reweighing([{"s": 0}], [{"s": 1}]).fit_transform(ds)
    np.testing.assert_allclose(out.instance_weights, kamiran_calders.reweighing_weights(s, y), rtol=1e-12)
    exp = kamiran_calders.expected_sizes(s, y)
    for (a, b), e in exp.items():
        m = (s == a) & (y == b)
        assert out.instance_weights[m].sum() == pytest.approx(e)


def test_reweighing_weights_times_group_size_are_expected_sizes():
    s, y, _ = biased(777, seed=5)
    w = kamiran_calders.reweighing_weights(s, y)
    n = len(y)
    for (a, b), e in kamiran_calders.expected_sizes(s, y).items():
        m = (s == a) & (y == b)
        assert w[m].sum() == pytest.approx((s == a).sum() * (y == b).sum() / n)
        assert w[m].sum() == pytest.approx(e)


def test_preferential_changes_the_border_rows():
    """KC 2012: DN / FP lose their highest- / lowest-scored rows, DP / FN duplicate their lowest- / highest-scored."""
    s, y, rng = biased(1000, seed=1)
    score = rng.random(len(y))
    idx = kamiran_calders.preferential(s, y, score)
    target = {g: int(np.floor(e + 0.5)) for g, e in kamiran_calders.expected_sizes(s, y).items()}
    counts = np.bincount(idx, minlength=len(y))
    for (a, b), want in target.items():
        rows = np.flatnonzero((s == a) & (y == b))
        order = rows[np.argsort(-score[rows] if b == 0 else score[rows])]  # border first
        assert counts[rows].sum() == want
        if len(rows) > want:  # the dropped rows are exactly the len - want most borderline
            assert set(rows[counts[rows] == 0]) == set(order[:len(rows) - want])
        else:  # every row kept, the extra copies on the most borderline first, cycling through the ranking
            extra = np.bincount(order[np.arange(want - len(rows)) % len(rows)], minlength=len(y))
            np.testing.assert_array_equal(counts[rows], 1 + extra[rows])
            assert counts[order[0]] >= counts[order[-1]]
    # s = 0 is deprived here: its negatives shrink and its positives grow
    assert target[(0, 0)] < ((s == 0) & (y == 0)).sum() and target[(0, 1)] > ((s == 0) & (y == 1)).sum()


def test_balanced_sets_have_four_equal_groups():
    s, y, rng = biased(900, seed=2)
    smallest = np.bincount(2 * s + y, minlength=4).min()
    for size in (smallest, 2 * smallest):  # without and with replacement
        idx = kamiran_calders.balanced(s, y, size, 30, rng)
        assert idx.shape == (30, 4 * size)
        counts = np.stack([np.bincount(2 * s[r] + y[r], minlength=4) for r in idx])
        assert (counts == size).all()
    idx = kamiran_calders.balanced(s, y, smallest, 5, rng)
    assert all(len(np.unique(r)) == len(r) for r in idx)  # no duplicates when every group is large enough


@pytest.mark.parametrize("model", ["lr", "svm"])
def test_batched_fit_equals_sklearn(model):
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, 300, 3))
    y = (X @ np.array([1.0, -2.0, 0.5]) + rng.normal(size=(4, 300)) > 0).astype(int)
    W = batched_linear.fit(X, y, model, C=0.5)
    for k in (0, 3):
        ref = (LogisticRegression(C=0.5, tol=1e-10, max_iter=10_000) if model == "lr"
               else LinearSVC(C=0.5, tol=1e-10, max_iter=100_000)).fit(X[k], y[k])
        np.testing.assert_allclose(W[k], np.r_[ref.coef_[0], ref.intercept_], atol=1e-4)  # lbfgs stops early


@pytest.mark.parametrize("model", ["lr", "svm"])
def test_warm_started_indexed_fits_equal_independent_fits(model):
    """fit_indexed's warm start (every model starts from the first set's solution) changes the work, not the
    solutions: the same weights as cold fits, each checked against scikit-learn on its own set."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    rng = np.random.default_rng(1)
    X = rng.normal(size=(600, 4))
    y = (X @ np.array([1.0, -1.0, 0.5, 0.0]) + rng.normal(size=600) > 0.3).astype(int)
    idx = rng.integers(0, 600, size=(6, 400))
    warm = batched_linear.fit_indexed(X, y, idx, model, 1.0)
    cold = batched_linear.fit_indexed(X, y, idx, model, 1.0, warm_start=False)
    np.testing.assert_allclose(warm, cold, atol=1e-4)  # both stop at the Newton-decrement tolerance
    for k in (1, 5):
        ref = (LogisticRegression(C=1.0, tol=1e-10, max_iter=10_000) if model == "lr"
               else LinearSVC(C=1.0, tol=1e-10, max_iter=100_000)).fit(X[idx[k]], y[idx[k]])
        np.testing.assert_allclose(warm[k], np.r_[ref.coef_[0], ref.intercept_], atol=1e-4)


def test_semi_supervised_split_hides_labels_only_of_the_pool():
    train, test = table("synth_fes")
    labelled = train.meta["row_labelled"]
    assert len(test) == 2000 and abs(labelled.sum() - (~labelled).sum()) <= 1
    seen = datasets.hide_labels(train)
    assert (seen.y[~labelled] == -1).all() and (seen.y[labelled] == train.y[labelled]).all()
    assert seen.s is not None and (seen.s == train.s).all()  # z stays available for sampling
    assert seen.X.shape[1] == 2  # the protected attribute is never a feature


def test_semi_supervised_split_of_a_real_card_is_half_unlabelled():
    tbl = datasets.Table("t", np.zeros((1000, 1)), np.zeros(1000, int), np.zeros(1000, int), ["x"])
    train, test = datasets.split(tbl, 0.2, np.random.default_rng(0), unlabelled_size=0.5)
    labelled = train.meta["row_labelled"]
    assert (~labelled).sum() == 500 and labelled.sum() == 400 and len(test) == 100


@pytest.fixture(scope="module")
def synth():
    train, test = table("synth_fes", variant="da2")
    return train, datasets.hide_labels(train), test


@pytest.mark.parametrize("algo", ["ori", "kc_uniform", "kc_preferential", "fes"])
@pytest.mark.parametrize("model", ["lr", "svm"])
def test_plugins_run_and_report_the_spec_metrics(synth, algo, model):
    train, seen, test = synth
    params = {"model": model} | ({"K": 20} if algo == "fes" else {})
    plugin, _ = fit(algo, seen, **params)
    assert plugin.claims() == "none"
    out = evaluate.semi_supervised(plugin, train, test, np.random.default_rng(0))
    assert sum(out[g] for g in ("G_PP", "G_UP", "G_PN", "G_UN")) == len(test)
    rates = metrics.GroupRates(test.y, plugin.predict(test.X), test.s).by_group()
    assert out["discrimination"] == pytest.approx(abs(rates[0]["positive_rate"] - rates[1]["positive_rate"]))
    assert out["accuracy"] > 0.8
    if algo == "fes":
        assert out["n_unlabelled"] == (seen.y < 0).sum() and 0 <= out["noise_gap"] <= 2
        assert plugin.W.shape == (20, 3)


def test_fes_resampled_sets_are_balanced_and_use_the_pseudo_labels(synth):
    _, seen, _ = synth
    plugin, _ = fit("fes", seen, K=8, rho=0.5)
    assert len(plugin.pseudo_rows) == round(0.5 * (seen.y < 0).sum())
    assert (seen.y[plugin.pseudo_rows] == -1).all()  # only hidden-label rows are pseudo-labelled
    assert plugin.group_size == min(plugin.train_groups.values())
