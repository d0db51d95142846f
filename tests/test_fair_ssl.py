"""Fair graph-based SSL family (fair_ssl.md): the graph and label propagation, the constrained w-steps (DI convex,
mistreatment by our convex-concave procedure), the four plugins, N/A on solver failure."""

from __future__ import annotations

import numpy as np
import pytest

from privfair_cli import datasets, evaluate
from privfair_cli.algorithms import fair_ssl
from privfair_cli.errors import ConfigError, DataError
from privfair_cli.typed import typed
from tests.conftest import fit, needs_data


def clusters(n=120, seed=0):
    """Two Gaussian blobs in 2-D (label = blob), the first 30 rows labelled."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    X = rng.normal(size=(n, 2)) * 0.6 + np.where(y[:, None] == 1, 1.0, -1.0)
    return X, y


def test_gaussian_graph_matches_the_kernel_and_the_median_rule():
    X, _ = clusters(40)
    A, sigma = fair_ssl.gaussian_graph(X, 0.7)
    d2 = ((X[:, None] - X[None]) ** 2).sum(-1)
    want = np.exp(-d2 / 0.7**2)
    np.fill_diagonal(want, 0)
    assert A.dtype == np.float32 and sigma == 0.7
    np.testing.assert_allclose(A, want, atol=1e-6)
    _, med = fair_ssl.gaussian_graph(X, 0.7, "median")
    off = d2[~np.eye(len(X), dtype=bool)]
    assert med**2 == pytest.approx(np.sort(off)[len(off) // 2], rel=1e-5)


def test_label_propagation_is_the_dense_harmonic_solution_and_its_corrected_closed_form():
    X, y = clusters()
    n_l, alpha = 30, 0.7
    A, _ = fair_ssl.gaussian_graph(X, 1.0)
    graph = fair_ssl.Propagator.build(A, n_l, 1e-8)
    L = np.diag(A.astype(float).sum(1)) - A.astype(float)
    harmonic = np.linalg.solve(L[n_l:, n_l:], -L[n_l:, :n_l] @ y[:n_l])
    assert not graph.ridge_used
    np.testing.assert_allclose(graph.harmonic(y[:n_l]), harmonic, rtol=1e-6, atol=1e-9)
    # the y_u-step solves the stationarity condition of sum CE(y_u) + alpha y^T L y (spec §1.3b)
    score = np.random.default_rng(1).normal(size=len(y) - n_l)
    yu = graph.propagate(y[:n_l], score, alpha)
    grad = -score + 2 * alpha * (L[n_l:, n_l:] @ yu + L[n_l:, :n_l] @ y[:n_l])
    np.testing.assert_allclose(grad, 0, atol=1e-5)  # |score| ~ 1: the solve is accurate to ~1e-7 relatively
    full = np.r_[y[:n_l], yu]
    assert graph.smoothness(full) == pytest.approx(full @ L @ full, rel=1e-5)


def test_label_propagation_agrees_with_scikit_learn_in_the_hard_clamping_limit():
    """scikit-learn's LabelPropagation clamps the labelled rows hard: its fixed point is the harmonic solution.
    LabelSpreading (soft clamping) with a small clamping weight gives the same hard labels on separated blobs."""
    from sklearn.semi_supervised import LabelPropagation, LabelSpreading

    X, y = clusters()
    n_l, sigma = 30, 1.0
    target = np.r_[y[:n_l], -np.ones(len(y) - n_l, int)]
    A, _ = fair_ssl.gaussian_graph(X, sigma)
    ours = fair_ssl.Propagator.build(A, n_l, 1e-8).harmonic(y[:n_l])
    lp = LabelPropagation(kernel="rbf", gamma=1 / sigma**2, max_iter=200_000, tol=1e-12).fit(X, target)
    np.testing.assert_allclose(lp.label_distributions_[n_l:, 1], ours, atol=1e-4)
    ls = LabelSpreading(kernel="rbf", gamma=1 / sigma**2, alpha=0.01, max_iter=10_000, tol=1e-12).fit(X, target)
    assert (ls.transduction_[n_l:] == (ours >= 0.5)).mean() >= 0.97


def test_a_disconnected_unlabelled_row_gets_the_ridge_and_is_counted():
    X, y = clusters(40)
    X[-1] = 50.0  # far from everything: zero degree in float32
    A, _ = fair_ssl.gaussian_graph(X, 1.0)
    graph = fair_ssl.Propagator.build(A, 10, 1e-8)
    assert graph.ridge_used and graph.zero_degree_fraction() == pytest.approx(1 / 30)
    assert np.isfinite(graph.harmonic(y[:10])).all()


def test_zero_degree_shortcut_and_kept_pull_are_the_former_computations_bit_for_bit():
    """A zero-degree unlabelled row makes the plain Cholesky of L_uu fail for certain, so `build` factorises the
    ridged Laplacian without trying it: the factor the failed try led to. A_ul y_l is computed once per y_l: the
    numbers of the product done in every call before, and a new y_l gets its own."""
    import scipy.linalg

    X, y = clusters(40)
    X[-1] = 50.0
    A, _ = fair_ssl.gaussian_graph(X, 1.0)
    n_l = 10
    L = -A[n_l:, n_l:].astype(np.float64)
    L[np.diag_indices_from(L)] += A.sum(1, dtype=np.float64)[n_l:]
    with pytest.raises(np.linalg.LinAlgError):
        scipy.linalg.cho_factor(L, lower=True, check_finite=False)
    graph = fair_ssl.Propagator.build(A, n_l, 1e-8)
    A_uu, A_lu = A[n_l:, n_l:], A[n_l:, :n_l].astype(np.float64) + A[:n_l, n_l:].T.astype(np.float64)
    R = A_uu.astype(np.float64)
    R += A_uu.T
    R *= -0.5
    R[np.diag_indices_from(R)] += -R.sum(1) + A_lu.sum(1) / 2 + 1e-8
    expected = scipy.linalg.cho_factor(R, lower=True, check_finite=False)[0]
    assert graph.ridge_used and np.array_equal(np.tril(graph.factor[0]), np.tril(expected))
    for y_l in (y[:n_l], 1 - y[:n_l], y[:n_l]):
        pull = A[n_l:, :n_l] @ y_l.astype(np.float64)
        assert np.array_equal(graph.labelled_pull(y_l), pull)
        assert np.array_equal(graph.harmonic(y_l), graph.solve(pull))
        score = np.linspace(-1, 1, len(A) - n_l)
        assert np.array_equal(graph.propagate(y_l, score, 0.7), graph.solve(pull + score / (2 * 0.7)))


def test_newton_reusing_the_line_searchs_scores_is_the_former_newton_bit_for_bit():
    """`newton_logistic` takes the accepted line-search point's scores into the next step instead of computing
    X z again: the former loop (below, unconstrained) gives the same w to the last bit."""
    import scipy.linalg
    from scipy import special

    X, z, y = toy(400, seed=3)
    X = np.c_[X, z]
    n = len(y)

    def former(X, y, tol=1e-12):
        b = np.zeros(X.shape[1])
        fb = fair_ssl.logistic_loss(X, y, b)
        for _ in range(100):
            p = special.expit(0.0 + X @ b)
            g = X.T @ (p - y) / n
            step = scipy.linalg.solve((X.T * (p * (1.0 - p))) @ X / n, g, assume_a="pos")
            dec = float(g @ step)
            if dec / 2 <= tol:
                return b
            t = 1.0
            while fair_ssl.logistic_loss(X, y, b - t * step) > fb - 0.25 * t * dec:
                t /= 2
            b, fb = b - t * step, fair_ssl.logistic_loss(X, y, b - t * step)
        return None

    assert np.array_equal(fair_ssl.newton_logistic(X, y.astype(float)), former(X, y.astype(float)))


def toy(n=300, seed=0):
    """Labels depend on x and on z; the unconstrained LR has a clearly non-zero DI and OMR covariance."""
    rng = np.random.default_rng(seed)
    z = (rng.random(n) < 0.5).astype(float)
    X = np.c_[rng.normal(size=n) + 0.8 * z, rng.normal(size=n), np.ones(n)]
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0.4).astype(int)
    return X, z, y


def cfg(**kw):
    base = {"model": "lr", "fairness": "di", "c": 0.0, "l2": 0.0, "tau": 1.0, "mu": 1.2, "tau_max": 1e10,
            "ccp_max_iter": 100, "ccp_tol": 1e-6, "feas_tol": 1e-6,
            "graph": {"sigma": 0.5, "sigma_mode": "fixed", "ridge": 1e-8, "max_gb": 6.0}}
    return typed(fair_ssl.FairLinearConfig, base | kw)


def test_di_constraint_holds_at_the_solution_and_binds():
    X, z, y = toy()
    a = fair_ssl.di_vector(X, z)
    free = fair_ssl.solve_w(X, y, [], cfg())
    c = abs(a @ free.w) / 4
    sol = fair_ssl.solve_w(X, y, [(X, z, y, c)], cfg(c=c))
    assert sol.ok and abs(a @ sol.w) <= c + 1e-6
    assert abs(a @ sol.w) == pytest.approx(c, rel=1e-3)  # active: the unconstrained optimum violates it


@pytest.mark.parametrize("l2", [0.0, 0.05])
def test_newton_is_the_conic_solvers_logistic_optimum(l2):
    """The unconstrained LR of the w-step by Newton's method equals cvxpy's (Clarabel) solution of the same
    problem."""
    import cvxpy as cp

    X, z, y = toy()
    w = cp.Variable(X.shape[1])
    loss = (cp.sum(cp.logistic(X @ w)) - y @ (X @ w)) / len(y) + l2 / 2 * cp.sum_squares(w)
    cp.Problem(cp.Minimize(loss)).solve(solver=cp.CLARABEL)
    np.testing.assert_allclose(fair_ssl.newton_logistic(X, y.astype(float), l2), w.value, rtol=1e-5)  # its tol


def test_newton_without_a_finite_optimum_is_as_good_as_the_conic_solvers_answer():
    """A few rows separated from the rest (their own one-hot column, all labelled 0) leave the l2-free loss without
    a minimiser: Newton stops within its tolerance of the infimum, at a loss no higher than Clarabel's `optimal`
    answer, with the same sign on every row and the same scores on the rows that are not separated. Where every
    row is separable it declines (any separating direction is as good), and cvxpy's status decides."""
    import cvxpy as cp

    X, z, y = toy()
    y = y.astype(float)
    X = np.c_[X, np.zeros(len(X))]
    X[:3, -1], y[:3] = 1.0, 0.0
    w = cp.Variable(X.shape[1])
    problem = cp.Problem(cp.Minimize((cp.sum(cp.logistic(X @ w)) - y @ (X @ w)) / len(y)))
    problem.solve(solver=cp.CLARABEL)
    b = fair_ssl.newton_logistic(X, y)
    assert problem.status == "optimal" and b is not None
    assert fair_ssl.logistic_loss(X, y, b) <= fair_ssl.logistic_loss(X, y, w.value) + 1e-9
    np.testing.assert_array_equal(X @ b > 0, X @ w.value > 0)
    assert np.all(X[:3] @ b < -10)  # the separated rows' probabilities near 0, as their labels
    np.testing.assert_allclose(X[3:] @ b, X[3:] @ w.value, atol=1e-3)
    assert fair_ssl.newton_logistic(X, (X[:, 0] > 0.4).astype(float)) is None  # every row separable
    assert fair_ssl.newton_logistic(X, (X[:, 0] > 0.4).astype(float), l2=0.05) is not None  # strongly convex


@pytest.mark.parametrize("l2", [0.0, 0.05])
def test_newton_under_linear_equalities_is_the_conic_solvers_optimum(l2):
    """min loss s.t. A b = r by Newton in A's null space equals Clarabel's solution of the same problem."""
    import cvxpy as cp

    X, z, y = toy()
    y = y.astype(float)
    A = np.array([fair_ssl.di_vector(X, z), [0.0, 1.0, 0.5]])
    r = np.array([0.01, -0.2])
    w = cp.Variable(X.shape[1])
    loss = (cp.sum(cp.logistic(X @ w)) - y @ (X @ w)) / len(y) + l2 / 2 * cp.sum_squares(w)
    cp.Problem(cp.Minimize(loss), [A @ w == r]).solve(solver=cp.CLARABEL)
    b = fair_ssl.newton_logistic(X, y, l2, A=A, r=r)
    np.testing.assert_allclose(A @ b, r, atol=1e-12)
    np.testing.assert_allclose(b, w.value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scope", ["one", "two"])
def test_the_di_w_step_by_newton_is_the_conic_solvers_constrained_optimum(scope):
    """The DI w-step (`_di_newton`: the lowest-loss feasible minimiser over the choices of active constraints)
    equals Clarabel's solution of |a_j.w| <= c_j, with one constraint set (active) or two (labelled and
    unlabelled rows with their own thresholds, as the combined scope has)."""
    import cvxpy as cp

    X, z, y = toy()
    free = fair_ssl.newton_logistic(X, y.astype(float))
    half = len(y) // 2
    parts = [slice(None)] if scope == "one" else [slice(None, half), slice(half, None)]
    sets = []
    for k, part in enumerate(parts):
        a = fair_ssl.di_vector(X[part], z[part])
        sets.append((X[part], z[part], y[part], abs(a @ free) * (0.25 if k == 0 else 0.6)))
    sol = fair_ssl.solve_w(X, y, sets, cfg(c=sets[0][3]))
    w = cp.Variable(X.shape[1])
    loss = (cp.sum(cp.logistic(X @ w)) - y @ (X @ w)) / len(y)
    cons = [cp.abs(fair_ssl.di_vector(Xs, zs) @ w) <= c for Xs, zs, _, c in sets]
    cp.Problem(cp.Minimize(loss), cons).solve(solver=cp.CLARABEL)
    assert sol.ok and sol.status == "optimal"
    for Xs, zs, _, c in sets:
        assert abs(fair_ssl.di_vector(Xs, zs) @ sol.w) <= c + 1e-9
    np.testing.assert_allclose(sol.w, w.value, rtol=1e-4, atol=1e-5)


def test_a_non_binding_di_constraint_returns_the_unconstrained_optimum():
    """|a.w*| <= c at the unconstrained optimum w*: it is the constrained optimum (convex loss), which the conic
    solve of the constrained problem confirms."""
    import cvxpy as cp

    X, z, y = toy()
    a = fair_ssl.di_vector(X, z)
    free = fair_ssl.newton_logistic(X, y.astype(float))
    c = abs(a @ free) * 1.5
    sol = fair_ssl.solve_w(X, y, [(X, z, y, c)], cfg(c=c))
    w = cp.Variable(X.shape[1])
    loss = (cp.sum(cp.logistic(X @ w)) - y @ (X @ w)) / len(y)
    cp.Problem(cp.Minimize(loss), [cp.abs(a @ w) <= c]).solve(solver=cp.CLARABEL)
    assert sol.ok and sol.status == "optimal"
    np.testing.assert_allclose(sol.w, w.value, atol=1e-5)


@pytest.mark.parametrize("model", ["lr", "svm"])
def test_large_c_is_the_unconstrained_model(model):
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    X, z, y = toy()
    lam = 1e-2
    sol = fair_ssl.solve_w(X, y, [(X, z, y, 1e6)], cfg(model=model, c=1e6, l2=lam))
    n = len(y)
    # (1/n) sum loss + lam/2 ||w||^2  <=>  C = 1 / (n lam) with the intercept regularised too
    if model == "lr":
        ref = LogisticRegression(C=1 / (n * lam), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y)
    else:
        ref = LinearSVC(C=1 / (n * lam), loss="hinge", fit_intercept=False, tol=1e-12, max_iter=1_000_000,
                        dual=True, random_state=0).fit(X, y)
        # liblinear's dual coordinate descent stops near, not at, the optimum: ours is at least as good
        obj = lambda w: np.mean(np.maximum(0, 1 - (2 * y - 1) * (X @ w))) + lam / 2 * w @ w  # noqa: E731
        assert obj(sol.w) <= obj(ref.coef_[0]) + 1e-7
    np.testing.assert_allclose(sol.w, ref.coef_[0], atol=1e-2 if model == "svm" else 1e-4)


def test_convex_concave_loop_reaches_the_known_constrained_optimum():
    """One feature + intercept: the feasible optimum of min loss s.t. |Cov_OMR| <= c is found by brute force on a
    grid; the CCP point is feasible and as good (within the grid's resolution)."""
    rng = np.random.default_rng(4)
    n = 200
    z = (rng.random(n) < 0.5).astype(float)
    x = rng.normal(size=n)
    y = (x + np.where(z == 1, 0.3, 1.2) * rng.normal(size=n) > 0).astype(int)
    X = np.c_[x, np.ones(n)]
    Xs, ys, a = fair_ssl.dm_terms(X, z, y, "omr")
    # the spec's two-sum form (N0/n') sum_{z=1} g - (N1/n') sum_{z=0} g, divided by M, is the same covariance
    g = lambda w: np.minimum(0, ys * (Xs @ w))  # noqa: E731
    two_sum = lambda w: ((z == 0).sum() / n * g(w)[z == 1].sum() - (z == 1).sum() / n * g(w)[z == 0].sum()) / n  # noqa: E731
    free = fair_ssl.solve_w(X, y, [], cfg())
    assert fair_ssl.dm_cov(free.w, Xs, ys, a) == pytest.approx(two_sum(free.w))
    c = abs(fair_ssl.dm_cov(free.w, Xs, ys, a)) / 3
    sol = fair_ssl.solve_w(X, y, [(X, z, y, c)], cfg(fairness="omr", c=c))
    assert sol.ok and abs(fair_ssl.dm_cov(sol.w, Xs, ys, a)) <= c + 1e-6
    grid = np.stack(np.meshgrid(np.linspace(-1, 5, 601), np.linspace(-3, 3, 601)), -1).reshape(-1, 2)
    scores = X @ grid.T
    loss = (np.logaddexp(0, scores) - y[:, None] * scores).mean(0)
    cov = a @ np.minimum(0, ys[:, None] * (Xs @ grid.T))
    best = loss[np.abs(cov) <= c].min()
    ours = np.mean(np.logaddexp(0, X @ sol.w) - y * (X @ sol.w))
    unconstrained = np.mean(np.logaddexp(0, X @ free.w) - y * (X @ free.w))
    assert unconstrained - 1e-9 <= ours <= best + 1e-3


class _Scaled:
    """A FairLinearConfig with the fair SSL plugins' `dm_scaling` and `ccp_solver` keys (the Zafar configs have
    neither: mean, auto)."""

    def __init__(self, base, dm_scaling, ccp_solver="auto"):
        self._base, self.dm_scaling, self.ccp_solver = base, dm_scaling, ccp_solver

    def __getattr__(self, key):
        return getattr(self._base, key)


@pytest.mark.parametrize("step", ["ParametricWStep", "LargeWStep"])
def test_sum_scaling_is_the_mean_covariance_times_m(step):
    """dm_scaling=sum (the default of fair_ssl_lr / fair_ssl_svm, Eqs. 5.20-5.21) constrains M |Cov_mean| <= c: the
    same optimum as the mean scaling at c / M, by both w-step forms."""
    rng = np.random.default_rng(4)
    n = 200
    z = (rng.random(n) < 0.5).astype(float)
    x = rng.normal(size=n)
    y = (x + np.where(z == 1, 0.3, 1.2) * rng.normal(size=n) > 0).astype(int)
    X = np.c_[x, rng.normal(size=n), np.ones(n)]
    Xs, ys, a = fair_ssl.dm_terms(X, z, y, "omr")
    _, _, a_sum = fair_ssl.dm_terms(X, z, y, "omr", "sum")
    np.testing.assert_allclose(a_sum, a * n)
    free = fair_ssl.solve_w(X, y, [], cfg())
    c = abs(fair_ssl.dm_cov(free.w, Xs, ys, a)) / 3
    cls = getattr(fair_ssl, step)
    mean = cls(X, [(X, z, c)], cfg(fairness="omr", c=c)).solve(y, [y])
    total = cls(X, [(X, z, c * n)], _Scaled(cfg(fairness="omr", c=c * n), "sum")).solve(y, [y])
    assert mean.ok and total.ok
    assert abs(fair_ssl.dm_cov(total.w, Xs, ys, a_sum)) <= c * n + 1e-5
    np.testing.assert_allclose(total.w, mean.w, atol=2e-4)


@pytest.mark.parametrize("scope", ["one", "two"])
def test_newton_qp_convex_concave_agrees_with_the_conic_solver(scope):
    """The proximal-Newton subproblem solver (`ccp_solver: newton_qp`, the default above 3,000 rows, where the
    conic solve fails) reaches the conic solver's CCP point: the same iterations, w within 1e-5, the same loss."""
    rng = np.random.default_rng(0)
    n = 300
    z = (rng.random(n) < 0.4).astype(float)
    X = np.c_[rng.normal(size=(n, 3)), np.ones(n)]
    y = (X[:, 0] + 0.5 * X[:, 1] + np.where(z == 1, 0.3, 1.2) * rng.normal(size=n) > 0).astype(int)
    parts = [slice(None)] if scope == "one" else [slice(0, 100), slice(100, None)]
    free = fair_ssl.solve_w(X, y, [], cfg())
    sets = []
    for rows in parts:
        Xs, ys, a = fair_ssl.dm_terms(X[rows], z[rows], y[rows], "omr", "sum")
        sets.append((X[rows], z[rows], abs(fair_ssl.dm_cov(free.w, Xs, ys, a)) / 3))
    labels = [y[rows] for rows in parts]
    conic = fair_ssl.ParametricWStep(X, sets, _Scaled(cfg(fairness="omr"), "sum", "conic")).solve(y, labels)
    qp = fair_ssl.LargeWStep(X, sets, _Scaled(cfg(fairness="omr"), "sum", "newton_qp")).solve(y, labels)
    assert conic.ok and qp.ok and qp.iterations == conic.iterations > 1
    np.testing.assert_allclose(qp.w, conic.w, atol=1e-5)
    assert fair_ssl.logistic_loss(X, y, qp.w) == pytest.approx(fair_ssl.logistic_loss(X, y, conic.w), abs=1e-7)
    assert fair_ssl.ccp_solver(_Scaled(cfg(), "sum", "auto"), 8000) == "newton_qp"
    assert fair_ssl.ccp_solver(_Scaled(cfg(), "sum", "auto"), 600) == "conic"


def test_fair_ssl_defaults_to_the_sum_scaling():
    from privfair_cli import registry

    assert registry.make("fair_ssl_lr").cfg.dm_scaling == "sum"
    assert registry.make("fair_ssl_svm").cfg.dm_scaling == "sum"
    assert fair_ssl.dm_scaling(registry.make("zafar_dm").cfg) == "mean"


def ssl_table(n=400, seed=0):
    rng = np.random.default_rng(seed)
    s = (rng.random(n) < 0.5).astype(int)
    X = np.c_[rng.random(n), rng.random(n) * 0.5 + 0.3 * s]
    y = (X[:, 0] + 0.3 * s + 0.2 * rng.normal(size=n) > 0.7).astype(int)
    tbl = datasets.Table("toy", X, y, s, ["a", "b"])
    return datasets.split(tbl, 0.3, np.random.default_rng(seed), unlabelled_size=0.5)


@pytest.mark.parametrize("scope", ["labeled", "unlabeled", "combined", "mixed"])
def test_fair_ssl_lr_respects_the_di_constraint_on_its_scope(scope):
    train, test = ssl_table()
    seen = datasets.hide_labels(train)
    plugin, _ = fit("fair_ssl_lr", seen, c=0.005, constraint_scope=scope, graph={"sigma": 0.3,
                    "sigma_mode": "fixed", "ridge": 1e-8, "max_gb": 1.0})
    lab = seen.y >= 0
    X = plugin._standardise(seen.X)
    sets = {"labeled": [lab], "unlabeled": [~lab], "combined": [lab, ~lab], "mixed": [np.ones_like(lab)]}[scope]
    for m in sets:
        assert abs(fair_ssl.di_vector(X[m], seen.s[m].astype(float)) @ plugin.w) <= 0.005 + 1e-6
    out = evaluate.metrics_for(plugin, train, test, None)
    assert out["solver_ok"] == 1 and 0 <= out["discrimination"] <= 1 and out["accuracy"] > 0.5
    assert out["discrimination"] == out["dis_di"] and 1 <= plugin.outer <= 20


def test_fair_ssl_lr_with_large_c_is_lr_on_its_final_labels():
    from sklearn.linear_model import LogisticRegression

    train, _ = ssl_table()
    seen = datasets.hide_labels(train)
    plugin, _ = fit("fair_ssl_lr", seen, c=1e6, l2=1e-2)
    lab = seen.y >= 0
    X = np.r_[plugin._standardise(seen.X[lab]), plugin._standardise(seen.X[~lab])]
    ref = LogisticRegression(C=1 / (len(X) * 1e-2), fit_intercept=False, tol=1e-12, max_iter=10_000)
    np.testing.assert_allclose(plugin.w, ref.fit(X, plugin.y_fit).coef_[0], atol=1e-4)


def kept_graph():
    """The factorised graph fair_ssl keeps (at most one)."""
    (sigma_graph,) = fair_ssl._GRAPH.values()
    return sigma_graph[1]


def test_runs_on_the_same_rows_share_one_factorised_graph():
    """A run that differs only in c reuses the graph built for the same rows (the same object, and the same
    result as from a fresh build); another sigma, or other rows, build their own."""
    seen = datasets.hide_labels(ssl_table()[0])
    fair_ssl._GRAPH.clear()
    first, _ = fit("fair_ssl_lr", seen, c=0.05)
    kept = kept_graph()
    assert not kept.A.flags.writeable and not kept.factor[0].flags.writeable
    again, _ = fit("fair_ssl_lr", seen, c=0.05)
    assert kept_graph() is kept
    fair_ssl._GRAPH.clear()
    fresh, _ = fit("fair_ssl_lr", seen, c=0.05)
    np.testing.assert_array_equal(again.w, fresh.w)
    np.testing.assert_array_equal(first.y_u, fresh.y_u)
    rebuilt = kept_graph()
    fit("fair_ssl_lr", seen, c=0.05, graph={"sigma": 0.3, "sigma_mode": "fixed", "ridge": 1e-8, "max_gb": 6.0})
    assert kept_graph() is not rebuilt
    fit("fair_ssl_lr", datasets.hide_labels(ssl_table(seed=1)[0]), c=0.05)
    assert kept_graph() is not rebuilt


@pytest.mark.parametrize("algo,fairness", [("fair_ssl_svm", "fnr"), ("zafar_dm", "fpr"), ("zafar_fc", "di")])
def test_other_plugins_run_and_report_their_notion(algo, fairness):
    train, test = ssl_table()
    plugin, _ = fit(algo, datasets.hide_labels(train), fairness=fairness, c=0.0 if fairness == "di" else 0.01)
    out = evaluate.metrics_for(plugin, train, test, None)
    assert out["solver_ok"] == 1 and out["discrimination"] == out[f"dis_{fairness}"]
    assert plugin.claims() == "none"


def test_a_solver_that_does_not_reach_optimal_gives_na_not_numbers():
    train, test = ssl_table()
    plugin, _ = fit("zafar_dm", datasets.hide_labels(train), c=0.0, tau=1e-9, ccp_max_iter=1)
    out = evaluate.metrics_for(plugin, train, test, None)
    assert out["solver_ok"] == 0 and np.isnan(out["accuracy"]) and np.isnan(out["discrimination"])
    assert any("N/A" in w for w in plugin.warnings())


def test_bad_inputs_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"algo.c=-1 is out of range"):
        fit("fair_ssl_lr", None, c=-1)
    with pytest.raises(ConfigError, match="needs .* GB, more than algo.graph.max_gb=.*data.unlabelled_size"):
        fair_ssl.check_graph_fits(40_000, 30_000, typed(fair_ssl.GraphConfig, {
            "sigma": 0.5, "sigma_mode": "fixed", "ridge": 1e-8, "max_gb": 6.0}, "algo.graph"))
    train, _ = ssl_table()
    labelled = train.subset(np.flatnonzero(train.meta["row_labelled"]))
    with pytest.raises(DataError, match="constraint_scope=unlabeled needs unlabelled rows"):
        fit("fair_ssl_lr", labelled, constraint_scope="unlabeled")


def test_collinear_columns_do_not_change_the_solution():
    """One-hot columns that sum to the intercept leave the unregularised problem a flat direction; the w-step
    searches the row space, so the fitted scores are those of the problem without the redundant column."""
    X, z, y = toy()
    dup = np.c_[X[:, :1], X[:, :1] * 2.0, X[:, 1:]]
    a = fair_ssl.solve_w(X, y, [(X, z, y, 0.01)], cfg(c=0.01))
    b = fair_ssl.solve_w(dup, y, [(dup, z, y, 0.01)], cfg(c=0.01))
    assert a.ok and b.ok
    np.testing.assert_allclose(dup @ b.w, X @ a.w, atol=1e-5)


def test_unlabelled_used_keeps_the_split_and_uses_that_many_unlabelled_rows():
    """Figs. 5.2 / 5.6: `unlabelled_used` = k fits on the same labelled rows and k of the unlabelled ones (0: the
    labelled rows alone, which with a non-binding c is plain LR on them)."""
    from sklearn.linear_model import LogisticRegression

    train, _ = ssl_table()
    seen = datasets.hide_labels(train)
    lab = seen.y >= 0
    some, _ = fit("fair_ssl_lr", seen, c=1e6, unlabelled_used=50)
    assert len(some.y_u) == 50 and some.extra_metrics()["unlabelled_used"] == 50
    none, _ = fit("fair_ssl_lr", seen, c=1e6, l2=1e-2, unlabelled_used=0)
    assert len(none.y_u) == 0 and none.outer == 1
    X = none._standardise(seen.X[lab])
    ref = LogisticRegression(C=1 / (len(X) * 1e-2), fit_intercept=False, tol=1e-12, max_iter=10_000)
    np.testing.assert_allclose(none.w, ref.fit(X, seen.y[lab]).coef_[0], atol=1e-4)
    # the standardisation is fitted on the rows in use only
    np.testing.assert_allclose(none.mean, seen.X[lab].mean(0))


@needs_data("bank_marketing")
def test_bank_additional_card_is_the_thesis_bank_data():
    """Table 5.3's card: bank-additional-full (41,188 rows, 20 attributes: the counts the thesis prints), z = age <= 25,
    age not a feature; 12,000 rows a seed split 4,000 / 4,000 / 4,000."""
    from privfair_cli import runner, schema
    from privfair_cli.config import load_card

    card = load_card("bank/zhang2022_fair_ssl_additional")
    t = datasets.load(card)
    assert len(t) == 41188 and card["name"] == "bank_additional_fair_ssl"
    assert not any(name == "age" or name.startswith("age=") for name in t.feature_names)
    assert len(card["features"]["numeric"]) + len(card["features"]["onehot"]) == 19  # the 20 attributes but age
    assert 0.03 < 1 - t.s.mean() < 0.05  # age <= 25
    prepared = runner.prepare(schema.validate_card(card), 0, log=lambda *_: None)
    train, test = datasets.hide_labels(prepared.train), prepared.test
    assert len(test) == 4000 and int((train.y >= 0).sum()) == 4000 and int((train.y < 0).sum()) == 4000
