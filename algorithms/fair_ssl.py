"""Fairness constraints in graph-based semi-supervised learning (Zhang thesis ch. 5; fair_ssl.md).

Plugins (kind `semi_supervised`; no differential privacy in this chapter: guarantee `none`):
- `fair_ssl_lr` (§1): build the Gaussian graph over the labelled + unlabelled training rows (§0.1) once, factorise
  L_uu once (Cholesky, reused by every outer iteration), initialise y_u by the harmonic solution, then alternate
  (a) a fairness-constrained logistic regression on D_l and the currently labelled D_u (`fairness`:
  di | omr | fpr | fnr, `constraint_scope`: labeled | unlabeled | combined | mixed, thresholds `c` or `c1`/`c2`)
  and (b) the corrected closed-form label propagation y_u = L_uu^-1 (A_ul y_l + X_u w / (2 alpha)), thresholded
  at T;
- `fair_ssl_svm` (§2): the same with the L2-regularised hinge loss (linear SVM);
The chapter's baselines, Zafar et al.'s constrained linear models on D_l only (`zafar_fc`, `zafar_dm`), are
algorithms/zafar.py, on this module's w-step (`solve_w`) and standardisation (`FairLinear`).

Solvers: every w-step is a cvxpy problem (Clarabel). The DI constraint is linear in w (convex). The mistreatment
constraints are differences of convex functions: they are solved by our own penalty convex-concave procedure
(`ccp`, Shen et al. 2016's DCCP scheme): linearise the concave part at the current w, add slack variables
penalised by tau, re-solve, tau <- min(mu tau, tau_max), until the objective settles with zero slack. A solve
that does not end `optimal` (or a CCP point that violates |Cov| <= c) makes the run's accuracy and discrimination
N/A (NaN, `solver_ok` = 0, the status in the run's warnings), never a number.

Covariance scaling (`dm_scaling`, mistreatment notions only; default `sum`). The thesis writes the constraint as
|(1/k) g_w (z - zbar)| <= c (Eq. 5.6; Eq. 5.13 for DI, with the explicit 1/k), but the mistreatment constraint it
solves is Eqs. 5.20-5.21 (§5.2.4.2, pp. 77-78): (k1/k) |sum_{D0} g + sum_{D1} g| <= c, a sum over the rows with no
1/k. Zafar et al.'s code (WWW 2017, `get_constraint_list_cov`) divides by the rows (1/M, `mean`), which the spec
recommends (§8.12). With `mean`, every c >= 0.5 of the thesis' OMR grid (0-5) is non-binding in every run on Titanic
and Bank (the unconstrained optimum's |Cov| is O(0.01-0.1)), so the constraint never acts and the scopes coincide,
against the thesis' text and Table 5.4 (accuracy and Dis of the labelled scope rise with c). With `sum` (M = 1:
|sum_i (z_i - zbar) g_i| <= c, the covariance times M, the scale of Eqs. 5.20-5.21) c = 0-5 binds on Titanic
(M = 200-600; labelled scope, seeds 0-2: accuracy 0.698 / 0.718 / 0.728 / 0.738 and Dis 0.05-0.07 rising from c = 1
to 5, the thesis 0.745-0.755 / 0.03-0.08) and stays near c = 0 on Bank (M = 4,000-8,000), where the thesis' Table
5.3 is flat from c = 0 to 5. So `sum` is the default of fair_ssl_lr / fair_ssl_svm; `mean` is kept as the option
(and is what the Zafar baselines use: their configs have no such key, `dm_scaling()`). Disparate impact keeps the
1/|S| of Eq. 5.13 (its c grid 0-0.25 and Table 5.2's saturation at c ~ 0.15 fit it). The two scalings solve the same
problem at c_sum = M c_mean (tested).

Deviations and resolutions (by spec item):
- §8.12 covariance scaling: mistreatment constraints use the sum scaling of Eqs. 5.20-5.21 by default (above), not
  the spec's recommended 1/|S| (`dm_scaling: mean`).
- §0 standardisation: features are standardised with the mean / std of D_l u D_u (the card's [0, 1] view
  first); the sensitive attribute is never a feature; an intercept column is appended.
- §0.1 / §8.11: A is float32 (its exp underflows to exactly 0 below ~1e-45, so far pairs have no edge); L_uu is
  built and factorised in float64; the 1e-8 ridge (`graph.ridge`) is added only when the Cholesky factorisation
  of L_uu fails (an unlabelled component without an edge to a labelled row), to the Laplacian of the symmetrised
  A (the float32 product leaves A asymmetric by ~1e-6, which can make a singular block indefinite); the fraction
  of unlabelled rows with zero degree is reported (`zero_degree_fraction`) and warned about when positive.
  `graph.sigma_mode: median` sets sigma^2 = the median squared distance between distinct training rows (a
  documented deviation).
- §0.1 reuse: the graph and its factor are kept from one run to the next of the same process when they are built
  from the same rows with the same graph settings (`factorised_graph`; a sweep runs a seed's jobs side by side),
  so the runs of one split that differ in c, scope or notion factorise once.
- §0.1 memory: a graph whose A (4 N^2 bytes) plus L_uu factor (8 N_u^2 bytes) exceeds `graph.max_gb` is refused
  before it is built, with one line naming its size and the options that shrink it.
- §1.3a: the cross-entropy of the w-step is the mean over D_l u D_u (§8.15), plus an optional L2 term `l2`
  (default 0: the seed has none); the y_u-step uses the sum (spec §1.3b).
- §1.3d: stop when y_u does not change, the relative change of the Eq. 5.12 objective is < `tol`, or after
  `max_outer` iterations.
- §1.3a solver: w is searched in the row space of X (w = V beta, V the right singular vectors of X with non-zero
  singular values): the same optimum, but without the flat direction that one-hot columns summing to the intercept
  give the unregularised problem; Clarabel first, SCS (eps 1e-9, 120 s) where Clarabel stops short of `optimal`.
- §1.3a compiled once: a run's w-step (`WStep`) is compiled by cvxpy once and re-solved with Parameters (up to
  3,000 rows per-row Parameters, `ParametricWStep`; above, only d-vector and scalar Parameters, `LargeWStep`, since
  per-row Parameters make cvxpy's DPP tensors grow with the square of the rows); the max(0, -m_i) terms of the
  mistreatment constraint enter through auxiliary t_i >= max(0, -m_i): the same problem, solved to the same
  tolerance, but the two forms can differ in the solver's rounding (and so, rarely, in `optimal` vs
  `optimal_inaccurate`).
- §1.3a CCP start: where the unconstrained optimum already satisfies |Cov| <= c it is returned at once (it is the
  constrained optimum: the loss is convex and its global minimiser feasible), which the spec's warm start reaches
  after one CCP step anyway. The same holds for the DI constraint (linear): a w-step whose unconstrained optimum
  satisfies |a.w| <= c returns it without the constrained solve.
- §1.3a LR w-step without mistreatment terms: solved by Newton's method (`newton_logistic`, to a Newton decrement
  of 1e-12), about 50x faster than the conic solve of its exponential cones. Under DI constraints the optimum is
  the feasible, lowest-loss one of the minimisers over each choice of active constraints a_j.w = +-c_j (Newton in
  the null space of the active rows; `_di_newton`); all tested against Clarabel's solution. Where a few rows are
  separated from the rest (a rare one-hot category whose pseudo labels are all 0, as on Health) the l2-free loss
  has no minimiser: Newton's point is within its tolerance of the infimum, at a lower loss than Clarabel's
  `optimal` answer and with the same sign on every row, and is taken (Clarabel's conic solve of the constrained
  problem there ended `optimal_inaccurate`, SCS ran out of time: N/A). Where every row is separated, or Newton does
  not settle, cvxpy solves it as before. The SVM and the mistreatment constraints are solved by cvxpy.
- §1.3a CCP subproblem solver (`ccp_solver`): above 3,000 rows (`auto`) the LR convex-concave subproblems are
  solved by proximal Newton (`_ccp_newton_qp`: the loss's second-order model plus the exact slack penalty as a QP,
  line search on the subproblem objective) instead of cvxpy's exponential cones, which failed on Bank (Clarabel
  `optimal_inaccurate` / solver error after 51 s on the first subproblem over 8,000 rows, SCS out of time: N/A);
  the same CCP iterates (tested against the conic form: the same iteration count, w within 1e-5). Up to 3,000 rows
  (Titanic) the conic form stays the default (its run records were made with it); `ccp_solver: newton_qp` or
  `conic` picks one everywhere.
- §1.3a CCP: the linearisation uses the subgradient 0 at the kink of min(0, .); convergence when the relative
  objective change is < `ccp_tol` and every slack <= 1e-7; the final point must satisfy |Cov| <= c + `feas_tol`
  exactly (evaluated on the true, not linearised, constraint) or the run is N/A.
- §2: fair_ssl_svm's y_u-step reuses the LR closed form with the SVM score (the spec's recommendation); the hinge
  loss is the plain hinge plus (lam / 2) ||w||^2, prediction 1[w.x >= 0].
- §8.2: `yu_update: printed` keeps the seed's Eq. 5.16 (sign error) for debugging only.
- §8.8: `c1` / `c2` default to `c` (null in the config).
- §1.5 Figs. 5.2 / 5.6: |D_u| is varied by `unlabelled_used` (a seeded random subset of the split's unlabelled rows;
  null = all), so the labelled and test rows stay the same across the sweep; the rows left out are not in the
  graph nor in the standardisation.
- §8.9: a non-optimal solver status gives N/A cells (NaN metrics) with the status in the warnings.
- §6 Bank: Table 5.3 runs bank-additional-full (recipe `bank/zhang2022_fair_ssl_additional`: the thesis' 41,188 rows
  x 20 attributes), z = age <= 25 (the spec's default; the thesis gives no threshold), age itself not a feature;
  the older `bank_fair_ssl` (bank-full, age a feature) stays for the figure sweeps' records.
- §8.11 / pseudo-label collapse: the graph is Eq. 5.3 on standardised features (the spec's choice; the seed does not
  say how features are scaled). On Titanic, sigma = 0.1 leaves 5-10 % of the unlabelled rows at zero degree and
  21-28 % below 1e-3, and the thresholded harmonic start labels 20-26 % positive (true 37-41 %): the start of the
  collapse to all-negative pseudo labels. On the card's [0, 1] view the same sigma leaves 0 % / 1 % and labels
  28-34 % positive (seeds 0-2). Not made the default: nothing in the seed says which scaling it used.
"""

from __future__ import annotations

import hashlib
import itertools
import time
import warnings
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import scipy.linalg
from scipy import special

from privfair_cli.errors import ConfigError, DataError
from privfair_cli.memo import Memo
from privfair_cli.registry import Plugin, register
from privfair_cli.typed import bounds, typed

FAIRNESS = ("di", "omr", "fpr", "fnr")
SMALL_GRAPH = 3000  # unlabelled rows below which L_uu is factorised on one BLAS thread


# ---------------------------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class GraphConfig:
    sigma: float = field(metadata=bounds(gt=0))
    sigma_mode: Literal["fixed", "median"]
    ridge: float = field(metadata=bounds(gt=0))
    max_gb: float = field(metadata=bounds(gt=0))


@dataclass(frozen=True)
class FairLinearConfig:
    model: Literal["lr", "svm"]
    fairness: Literal["di", "omr", "fpr", "fnr"]
    c: float = field(metadata=bounds(ge=0))
    l2: float = field(metadata=bounds(ge=0))
    tau: float = field(metadata=bounds(gt=0))
    mu: float = field(metadata=bounds(gt=1))
    tau_max: float = field(metadata=bounds(gt=0))
    ccp_max_iter: int = field(metadata=bounds(ge=1))
    ccp_tol: float = field(metadata=bounds(gt=0))
    feas_tol: float = field(metadata=bounds(ge=0))
    graph: dict  # the graph of the semi-supervised plugins; the Zafar baselines accept it unused (one sweep sets both)

    def __post_init__(self):
        object.__setattr__(self, "graph", typed(GraphConfig, dict(self.graph), "algo.graph"))


@dataclass(frozen=True)
class FairSSLConfig(FairLinearConfig):
    constraint_scope: Literal["labeled", "unlabeled", "combined", "mixed"]
    c1: float | None = field(metadata=bounds(ge=0))
    c2: float | None = field(metadata=bounds(ge=0))
    alpha: float = field(metadata=bounds(gt=0))
    T: float
    max_outer: int = field(metadata=bounds(ge=1))
    tol: float = field(metadata=bounds(gt=0))
    yu_update: Literal["corrected", "printed"]
    dm_scaling: Literal["sum", "mean"]
    ccp_solver: Literal["auto", "conic", "newton_qp"]
    unlabelled_used: int | None = field(metadata=bounds(ge=0))


# ---------------------------------------------------------------------------------------------- the graph
def graph_bytes(n: int, n_u: int, sigma_mode: str = "fixed") -> int:
    """Peak bytes of the graph: A (float32, N x N; a second copy for the median) and the float64 L_uu factor."""
    return 4 * n * n * (2 if sigma_mode == "median" else 1) + 8 * n_u * n_u


def check_graph_fits(n: int, n_u: int, g: GraphConfig) -> None:
    need = graph_bytes(n, n_u, g.sigma_mode) / 2**30
    if need > g.max_gb:
        raise ConfigError(f"the graph over N={n:,} rows ({n_u:,} unlabelled) needs {need:.3g} GB, more than "
                          f"algo.graph.max_gb={g.max_gb:g}; shrink it with data.n or data.unlabelled_size "
                          f"(or raise algo.graph.max_gb)")


def gaussian_graph(X: np.ndarray, sigma: float, sigma_mode: str = "fixed") -> tuple[np.ndarray, float]:
    """A_ij = exp(-||x_i - x_j||^2 / sigma^2), A_ii = 0, float32 (Eq. 5.2); returns (A, sigma used).
    `sigma_mode=median`: sigma^2 = the median squared distance over pairs i != j."""
    Xf = np.ascontiguousarray(X, dtype=np.float32)
    sq = np.einsum("ij,ij->i", Xf, Xf)
    A = Xf @ Xf.T
    A *= -2.0
    A += sq[:, None]
    A += sq[None, :]
    np.maximum(A, 0.0, out=A)
    np.fill_diagonal(A, 0.0)
    n = len(A)
    if sigma_mode == "median" and n > 1:
        flat = A.ravel().copy()
        k = n + (n * n - n) // 2  # the n diagonal zeros are the smallest values
        med = float(np.partition(flat, k)[k])
        del flat
        sigma = float(np.sqrt(med)) if med > 0 else sigma
    A *= np.float32(-1.0 / sigma**2)
    np.exp(A, out=A)
    np.fill_diagonal(A, 0.0)
    return A, sigma


@dataclass
class Propagator:
    """The factorised graph: A (float32, labelled rows first), the Cholesky factor of L_uu and the degrees.
    `harmonic(y_l)` = L_uu^-1 A_ul y_l (Zhu et al. 2003); `propagate(y_l, s_u, alpha)` = the corrected Eq. 5.16."""

    A: np.ndarray
    n_l: int
    factor: tuple
    degree: np.ndarray
    ridge_used: bool

    @classmethod
    def build(cls, A: np.ndarray, n_l: int, ridge: float) -> Propagator:
        degree = A.sum(1, dtype=np.float64)
        A_uu = A[n_l:, n_l:]

        def laplacian_uu(extra: float) -> np.ndarray:
            L = -A_uu.astype(np.float64)
            L[np.diag_indices_from(L)] += degree[n_l:] + extra
            return L

        from threadpoolctl import threadpool_limits

        def ridged() -> tuple:
            # a singular block (rows without a path to a labelled row): the ridge, on the Laplacian of the
            # symmetrised A (the float32 product leaves A asymmetric by ~1e-6, more than the ridge, which can
            # make such a block indefinite); exactly diagonally dominant, so the ridge makes it definite
            A_lu = A[n_l:, :n_l].astype(np.float64) + A[:n_l, n_l:].T.astype(np.float64)
            L = A_uu.astype(np.float64)
            L += A_uu.T
            L *= -0.5
            deg = -L.sum(1) + A_lu.sum(1) / 2
            L[np.diag_indices_from(L)] += deg + ridge
            return scipy.linalg.cho_factor(L, lower=True, overwrite_a=True, check_finite=False)

        # a zero-degree unlabelled row is a zero row of L_uu: its Cholesky pivot is exactly 0, so the plain
        # factorisation fails for certain (Bank: 11 % of the rows) and the ridged one is computed without trying it.
        # A small factorisation on one BLAS thread: threaded BLAS on shared cores made a 400 x 400 one take seconds
        with threadpool_limits(1 if len(A_uu) < SMALL_GRAPH else None):
            if np.any(degree[n_l:] == 0):
                return cls(A, n_l, ridged(), degree, True)
            try:
                factor = scipy.linalg.cho_factor(laplacian_uu(0.0), lower=True, overwrite_a=True,
                                                 check_finite=False)
                used = False
            except np.linalg.LinAlgError:
                factor = ridged()
                used = True
        return cls(A, n_l, factor, degree, used)

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        return scipy.linalg.cho_solve(self.factor, rhs, check_finite=False)

    def labelled_pull(self, y_l: np.ndarray) -> np.ndarray:
        """A_ul y_l in float64, kept for the last y_l asked for: y_l is fixed through a run, and each product casts
        the float32 N_u x N_l block to float64 (128 MB and 0.2-0.6 s on Bank, in every outer iteration before). The
        same product, computed once: the same numbers."""
        y64 = y_l.astype(np.float64)
        key = y64.tobytes()
        kept = self.__dict__.get("_pull")
        if kept is None or kept[0] != key:
            pull = self.A[self.n_l:, :self.n_l] @ y64
            pull.setflags(write=False)
            kept = self.__dict__["_pull"] = (key, pull)
        return kept[1]

    def harmonic(self, y_l: np.ndarray) -> np.ndarray:
        return self.solve(self.labelled_pull(y_l))

    def propagate(self, y_l: np.ndarray, score_u: np.ndarray, alpha: float) -> np.ndarray:
        return self.solve(self.labelled_pull(y_l) + score_u / (2 * alpha))

    def smoothness(self, y: np.ndarray) -> float:
        """y^T L y = sum_i deg_i y_i^2 - y^T A y."""
        y = y.astype(np.float64)
        return float(self.degree @ (y * y) - y @ (self.A @ y.astype(np.float32)).astype(np.float64))

    def zero_degree_fraction(self) -> float:
        deg_u = self.degree[self.n_l:]
        return float(np.mean(deg_u == 0)) if len(deg_u) else 0.0


# ---------------------------------------------------------------------------------------------- constraints
def factorised_graph(X: np.ndarray, n_l: int, g: GraphConfig) -> tuple[float, Propagator]:
    """The Gaussian graph over the rows of X (labelled rows first) and its factorised L_uu: (sigma used, Propagator).

    The last one built is kept: the runs of a sweep that differ only in c, the constraint scope or the fairness
    notion build the same graph from the same rows (Health: 16,000 nodes, a 12,000 x 12,000 factorisation, most of
    a run's time). The key is the rows' bytes and every graph setting, so a kept graph is only reused for exactly
    the inputs it was built from; it is read-only. A different graph replaces it (dropped before the new one is
    built, so at most one is held)."""
    Xc = np.ascontiguousarray(X)
    key = (hashlib.sha256(Xc.view(np.uint8)).hexdigest(), Xc.shape, str(Xc.dtype), n_l, float(g.sigma),
           g.sigma_mode, float(g.ridge))
    if key not in _GRAPH:
        _GRAPH.clear()  # dropped before the new one is built
        A, sigma = gaussian_graph(Xc, g.sigma, g.sigma_mode)
        graph = Propagator.build(A, n_l, g.ridge)
        for array in (graph.A, graph.factor[0], graph.degree):
            array.setflags(write=False)
        _GRAPH[key] = (sigma, graph)
    return _GRAPH[key]


_GRAPH = Memo(1)  # the last graph built (factorised_graph)


def di_vector(X: np.ndarray, z: np.ndarray) -> np.ndarray:
    """a with Cov_S(w) = a.w = (1/|S|) sum_i (z_i - mean z) x_i.w (Eq. 5.7)."""
    return X.T @ (z - z.mean()) / max(len(z), 1)


def dm_terms(X: np.ndarray, z: np.ndarray, y: np.ndarray, fairness: str, scaling: str = "mean"):
    """The rows S', signed labels and weights a_i = (z_i - mean_S' z) / M of Cov = sum a_i min(0, yt_i x_i.w)
    (§0.2; M = |S'|); `scaling="sum"`: M = 1 (the un-normalised covariance, the scale of Eqs. 5.20-5.21)."""
    yt = 2.0 * y - 1.0
    keep = {"omr": np.ones(len(y), bool), "fpr": yt < 0, "fnr": yt > 0}[fairness]
    Xs, zs, ys = X[keep], z[keep].astype(float), yt[keep]
    a = (zs - zs.mean()) / (max(len(zs), 1) if scaling == "mean" else 1.0) if len(zs) else zs
    return Xs, ys, a


def dm_scaling(cfg) -> str:
    """The mistreatment covariance's scaling: `dm_scaling` of the fair SSL plugins (default `sum`, the thesis'
    Eqs. 5.20-5.21), `mean` (1/M, Zafar et al.'s code) for the Zafar baselines, which have no such key."""
    return getattr(cfg, "dm_scaling", "mean")


def ccp_solver(cfg, rows: int) -> str:
    """How the LR w-step's convex-concave subproblems are solved: `conic` (cvxpy's exponential cones, Clarabel) or
    `newton_qp` (proximal Newton, a QP per step: `_WStep._ccp_newton_qp`); `auto` (the default, and the Zafar
    baselines', which have no such key) is newton_qp above `PARAMETRIC_ROWS` rows (Bank, Health: the conic solve
    fails there) and conic up to it (Titanic, whose run records were made with it)."""
    choice = getattr(cfg, "ccp_solver", "auto")
    if choice == "auto":
        return "newton_qp" if rows > PARAMETRIC_ROWS else "conic"
    return choice


def dm_cov(w: np.ndarray, Xs: np.ndarray, ys: np.ndarray, a: np.ndarray) -> float:
    return float(a @ np.minimum(0.0, ys * (Xs @ w)))


def logistic_loss(X: np.ndarray, y: np.ndarray, b: np.ndarray, l2: float = 0.0, offset=0.0) -> float:
    """(sum_i log(1 + exp(s_i)) - y.s) / n + l2 / 2 ||b||^2 with scores s = offset + X b: the LR w-step's
    objective."""
    z = offset + X @ b
    return float((np.logaddexp(0.0, z).sum() - y @ z) / len(y) + l2 / 2 * b @ b)


def newton_logistic(X: np.ndarray, y: np.ndarray, l2: float = 0.0, tol: float = 1e-12, max_iter: int = 100,
                    A: np.ndarray | None = None, r: np.ndarray | None = None) -> np.ndarray | None:
    """The minimiser of `logistic_loss`, subject to A b = r where A (k x d, independent rows) is given, by damped
    Newton (backtracking line search) over b = b0 + N z: b0 the least-norm solution of A b = r, N an orthonormal basis
    of A's null space (b0 is orthogonal to N z, so ||b||^2 = ||b0||^2 + ||z||^2). Stops at a Newton decrement
    lambda^2 / 2 <= `tol` (then the loss is within about that of its infimum); None where it does not get there
    within `max_iter` steps, or where every row is separated (loss near 0, below).

    Without l2 the infimum need not be attained: labels (quasi-)separable along a direction leave the loss falling
    towards it as ||b|| grows along that direction, and the decrement shrinks by a constant factor per step instead
    of quadratically. The point returned is then, like a conic solver's `optimal` answer to the same problem, one
    whose loss is within `tol` of the infimum; only the separated rows' scores depend on where it stops (tested:
    a lower loss than Clarabel's answer, the same sign on every row). Where every row is separated (the loss falls
    to 0) any separating direction scaled up is as good; Newton returns None and the conic solvers' status decides."""
    n = len(y)
    b0, N = np.zeros(X.shape[1]), None
    if A is not None and len(A):
        b0 = np.linalg.lstsq(A, r, rcond=None)[0]
        N = scipy.linalg.null_space(A)
    Z = X if N is None else X @ N
    off = X @ b0
    z = np.zeros(Z.shape[1])

    def f(z):  # logistic_loss, keeping its scores off + Z z: the next Newton step's, once z is accepted
        nonlocal scores
        scores = off + Z @ z
        return float((np.logaddexp(0.0, scores).sum() - y @ scores) / n + l2 / 2 * z @ z)

    scores = None
    fz = f(z)
    for _ in range(max_iter):
        p = special.expit(scores)
        g = Z.T @ (p - y) / n + l2 * z
        H = (Z.T * (p * (1.0 - p))) @ Z / n + l2 * np.eye(len(z))
        try:
            with warnings.catch_warnings():  # near separation H is ill-conditioned; the decrement judges the step
                warnings.simplefilter("ignore", scipy.linalg.LinAlgWarning)
                step = scipy.linalg.solve(H, g, assume_a="pos")
        except (np.linalg.LinAlgError, ValueError):
            return None
        dec = float(g @ step)
        if not np.isfinite(dec):
            return None
        if dec / 2 <= tol:
            # a loss near 0 without l2: every row separated, so any separating direction scaled up is as good and
            # nothing picks one out; None leaves the answer (or N/A) to the conic solvers' status
            return b0 + (z if N is None else N @ z) if l2 > 0 or fz > 1e-8 else None
        t = 1.0
        while t > 1e-12:
            fn = f(z - t * step)
            if fn <= fz - 0.25 * t * dec:
                break
            t /= 2
        else:
            return None
        z, fz = z - t * step, fn
    return None


@dataclass
class Solve:
    w: np.ndarray
    status: str
    ok: bool
    iterations: int = 1


def solve_w(X: np.ndarray, y: np.ndarray, sets: list[tuple], cfg, warm: np.ndarray | None = None) -> Solve:
    """The w-step: minimise the mean loss (LR cross-entropy or hinge + lam/2 ||w||^2) over the rows X, y subject to
    |Cov_S(w)| <= c_S for each (X_S, z_S, y_S, c_S) in `sets`. DI: one convex solve; mistreatment: the
    convex-concave procedure from `warm` (default: the unconstrained solution). One-off form of `WStep`."""
    step = WStep(X, [(Xs, zs, c) for Xs, zs, _, c in sets], cfg)
    return step.solve(y, [ys for _, _, ys, _ in sets], warm)


class _WStep:
    """What both forms of the w-step share: the solvers they run and the solution they return (w = V beta)."""

    V: np.ndarray
    cfg: object
    sets: list
    w: object

    def _run(self, problem) -> str:
        """Clarabel, then SCS at high accuracy where Clarabel stops short of `optimal` (its exponential-cone
        steps sometimes end `optimal_inaccurate` on problems SCS solves); the status is the last solver's."""
        import cvxpy as cp

        status = "not solved"
        scs = {"eps": 1e-9, "max_iters": 200_000, "time_limit_secs": 120.0}  # a stalled fallback ends, N/A
        for solver, opts in ((cp.CLARABEL, {}), (cp.SCS, scs)):
            try:
                with warnings.catch_warnings():  # "Solution may be inaccurate": the status says so
                    warnings.simplefilter("ignore", UserWarning)
                    problem.solve(solver=solver, **opts)
                status = str(problem.status)
            except cp.error.SolverError as err:
                status = f"solver_error ({str(err).splitlines()[0][:80]})"
            if status == "optimal":
                break
        return status

    def _result(self, beta: np.ndarray, status: str, ok: bool, it: int = 1) -> Solve:
        return Solve(self.V @ beta, status, ok, it)

    def _ccp(self, beta, terms, problem, loss, slacks, tau, linearise) -> Solve:
        """The convex-concave procedure both w-steps run: linearise the concave part at w_k (`linearise(beta)` sets
        the problem's Parameters), solve with the slacks penalised by tau, grow tau by mu up to tau_max, stop once
        the slacks vanish and the objective settles; the result is checked against the constraints."""
        tau_k, prev, status, it = self.cfg.tau, np.inf, "optimal", 0
        for it in range(1, self.cfg.ccp_max_iter + 1):
            linearise(beta)
            tau.value = tau_k
            status = self._run(problem)
            if status != "optimal" or self.w.value is None:
                return self._result(beta, status, False, it)
            beta = np.asarray(self.w.value, float)
            slack = max((float(s.value) for s in slacks), default=0.0)
            obj = float(loss.value)
            if slack <= 1e-7 and abs(prev - obj) <= self.cfg.ccp_tol * max(1.0, abs(obj)):
                break
            prev = obj
            tau_k = min(self.cfg.mu * tau_k, self.cfg.tau_max)
        return self._converged(beta, terms, it)

    def _converged(self, beta, terms, it: int):
        """The result of a convex-concave loop that stopped: feasible to `feas_tol` or `ccp_infeasible`."""
        gap = self._worst(beta, terms)
        if gap > self.cfg.feas_tol:
            return self._result(beta, f"ccp_infeasible (|Cov| exceeds c by {gap:.2g} after {it} iterations)", False,
                                it)
        return self._result(beta, "optimal", True, it)

    @staticmethod
    def _worst(beta: np.ndarray, terms: list[tuple]) -> float:
        """The largest |Cov| - c over the constraint sets at w = V beta (<= 0: feasible)."""
        return max((abs(dm_cov(beta, Xs, ys, a)) - c for Xs, ys, a, c in terms if len(a)), default=-1.0)

    def _free(self, y: np.ndarray, free) -> tuple[np.ndarray, str]:
        """The unconstrained optimum and its status: LR by Newton's method (`newton_logistic`, to the conic
        solver's tolerance and ~50x faster), the SVM (or an LR on which Newton does not settle) by the cvxpy
        problem `free()`."""
        beta = newton_logistic(self.Xr, y, self.cfg.l2) if self.cfg.model == "lr" else None
        if beta is not None:
            return beta, "optimal"
        status = self._run(free())
        if status != "optimal" or self.w.value is None:
            return np.zeros(self.V.shape[1]), status
        return np.asarray(self.w.value, float), status

    def _convex(self, y: np.ndarray, free, constrained) -> Solve:
        """The w-step without mistreatment terms: LR by `_di_newton`, the SVM (or an LR on which Newton does not
        settle) by the cvxpy problem `constrained` (or `free` without constraints)."""
        if self.cfg.model == "lr":
            beta = self._di_newton(y)
            if beta is not None:
                return self._result(beta, "optimal", True)
        problem = constrained if constrained is not None else free()
        status = self._run(problem)
        ok = status == "optimal" and self.w.value is not None
        return self._result(np.asarray(self.w.value if self.w.value is not None else np.zeros(self.V.shape[1])),
                            status, ok)

    def _di_newton(self, y: np.ndarray) -> np.ndarray | None:
        """The LR w-step under the DI constraints |a_j.w| <= c_j by Newton's method. The loss is convex and the
        constraints linear, so the optimum minimises the loss over the affine set of its active constraints
        (a_j.w = +c_j or -c_j): it is the feasible point of lowest loss among those minimisers, one per choice of
        active constraints (3^k for k sets, k <= 2; the unconstrained optimum first, returned at once when
        feasible). None where a Newton solve does not settle (cvxpy then solves it)."""
        best, best_loss = None, np.inf
        sides = [(None,) + ((0.0,) if c == 0 else (c, -c)) for _, c in self.di]
        for pick in itertools.product(*sides):
            rows = [(a, s) for (a, _), s in zip(self.di, pick, strict=True) if s is not None]
            A = np.array([a for a, _ in rows]) if rows else None
            if rows and np.linalg.matrix_rank(A) < len(rows):
                continue  # dependent constraints: the same affine set as a smaller choice
            beta = newton_logistic(self.Xr, y, self.cfg.l2, A=A, r=np.array([s for _, s in rows]) if rows else None)
            if beta is None:
                return None
            if all(abs(a @ beta) <= c + 1e-9 * max(1.0, c) for a, c in self.di):
                if not rows:
                    return beta  # the unconstrained optimum is feasible: the constrained optimum
                loss = logistic_loss(self.Xr, y, beta, self.cfg.l2)
                if loss < best_loss:
                    best, best_loss = beta, loss
        return best

    def _ccp_start(self, y, free, warm, set_labels) -> tuple[np.ndarray, list[tuple], Solve | None]:
        """The convex-concave procedure's start: `warm` (a w), or the unconstrained optimum (`_free`); with the
        sets' mistreatment terms. The third item is the w-step's answer when no iteration is needed: the
        unconstrained solve failed, or its optimum satisfies |Cov| <= c and so is the constrained optimum (the
        loss is convex and its global minimiser is feasible: the point the first CCP step would return)."""
        terms = [dm_terms(Xs, zs, ys, self.cfg.fairness, dm_scaling(self.cfg)) + (c,)
                 for (Xs, zs, c), ys in zip(self.sets, set_labels, strict=True)]
        if warm is not None:
            return self.V.T @ np.asarray(warm, float), terms, None
        beta, status = self._free(y, free)
        if status != "optimal":
            return beta, terms, self._result(beta, status, False)
        return beta, terms, (self._result(beta, "optimal", True, 1) if self._worst(beta, terms) <= 0 else None)


    def _ccp_newton_qp(self, beta: np.ndarray, terms: list[tuple], y: np.ndarray) -> Solve:
        """The convex-concave procedure of the LR w-step with each convex subproblem solved by proximal Newton
        (`ccp_solver: newton_qp`): the logistic loss is replaced by its second-order model at the current point and
        the model plus the subproblem's exact penalty tau * sum max(0, h_j(w) - c) (h_j the linearised, convex
        piecewise-linear constraint function) is minimised as a QP (no exponential cones: Clarabel's conic solve of
        the same subproblem over 8,000 rows failed after 51 s); a backtracking line search on the subproblem's own
        objective, until its predicted decrease is below 1e-11. The subproblem is strictly convex (LR in the row
        space of X), so its minimiser, and with it every CCP iterate, is the conic form's (tested against
        `ParametricWStep`). The CCP loop (tau growth, stopping rule, final feasibility check) is `_ccp`'s."""
        import cvxpy as cp

        d = self.V.shape[1]
        n = len(y)
        X, l2 = self.Xr, self.cfg.l2
        b = cp.Variable(d)
        R, r, g = cp.Parameter((d, d)), cp.Parameter(d), cp.Parameter(d)
        tau = cp.Parameter(nonneg=True)
        cons, slacks, lins = [], [], []
        for Xs, ys, a, c in terms:
            if not len(a):
                continue
            pos, neg = a > 0, a < 0
            t = cp.Variable(len(a), nonneg=True)
            lin_pos, lin_neg = cp.Parameter(d), cp.Parameter(d)
            s1, s2 = cp.Variable(nonneg=True), cp.Variable(nonneg=True)
            cons += [t >= -cp.multiply(ys, Xs @ b),
                     lin_pos @ b + (-a * neg) @ t <= c + s1,
                     lin_neg @ b + (a * pos) @ t <= c + s2]
            slacks += [s1, s2]
            lins.append((Xs, ys, a, c, lin_pos, lin_neg))
        qp = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(R @ b - r) + g @ b + tau * cp.sum(cp.hstack(slacks))), cons)

        def excess(beta):  # max(0, h_j(beta) - c) of the linearised constraints, per set and side
            out = []
            for Xs, ys, a, c, lin_pos, lin_neg in lins:
                hinge = np.maximum(0.0, -ys * (Xs @ beta))
                out += [max(0.0, float(lin_pos.value @ beta + (-a * (a < 0)) @ hinge) - c),
                        max(0.0, float(lin_neg.value @ beta + (a * (a > 0)) @ hinge) - c)]
            return out

        def loss(beta):
            return logistic_loss(X, y, beta, l2)

        def subproblem(beta, tau_k):
            """min loss + tau_k sum excess by proximal Newton from beta: (beta, status)."""
            tau.value = tau_k
            phi = loss(beta) + tau_k * sum(excess(beta))
            for _ in range(50):
                p = special.expit(X @ beta)
                grad = X.T @ (p - y) / n + l2 * beta
                H = (X.T * (p * (1.0 - p))) @ X / n + (l2 + 1e-12) * np.eye(d)
                try:
                    Rv = np.linalg.cholesky(H).T
                except np.linalg.LinAlgError:
                    return beta, "newton_qp: singular Hessian"
                R.value, r.value, g.value = Rv, Rv @ beta, grad
                status = self._run(qp)
                if status != "optimal" or b.value is None:
                    return beta, status
                step = np.asarray(b.value, float) - beta
                pen0 = tau_k * sum(excess(beta))
                decrease = float(grad @ step) + tau_k * sum(excess(beta + step)) - pen0
                if decrease > -1e-11 * max(1.0, abs(phi)):
                    return beta, "optimal"
                t = 1.0
                while t > 1e-10:
                    new = beta + t * step
                    phi_new = loss(new) + tau_k * sum(excess(new))
                    if phi_new <= phi + 0.25 * t * decrease:
                        break
                    t /= 2
                else:
                    return beta, "optimal"  # no decrease left along the step: within the solver's tolerance
                beta, phi = new, phi_new
            return beta, "optimal"

        tau_k, prev, it = self.cfg.tau, np.inf, 0
        for it in range(1, self.cfg.ccp_max_iter + 1):
            for Xs, ys, a, _c, lin_pos, lin_neg in lins:
                active = (ys * (Xs @ beta)) < 0
                lin_pos.value = Xs.T @ (a * active * (a > 0) * ys)
                lin_neg.value = Xs.T @ (-a * active * (a < 0) * ys)
            beta, status = subproblem(beta, tau_k)
            if status != "optimal":
                return self._result(beta, status, False, it)
            obj = loss(beta)
            if max(excess(beta), default=0.0) <= 1e-7 and abs(prev - obj) <= self.cfg.ccp_tol * max(1.0, abs(obj)):
                break
            prev = obj
            tau_k = min(self.cfg.mu * tau_k, self.cfg.tau_max)
        return self._converged(beta, terms, it)


class LargeWStep(_WStep):
    """The w-step of a large run (more than `PARAMETRIC_ROWS` rows: Health, Bank), re-solved with small Parameters
    only (d entries or a scalar): a Parameter with one entry per row multiplying an expression makes cvxpy's DPP
    tensors grow with the square of the rows (1.4 GB for one such Parameter over 4,000 rows, GBs at Health size).

    - LR: the loss reads the labels only through g = X^T y, sum(logistic(X w)) - g.w, so the unconstrained and the DI
      problem are compiled once per run, g re-set in every outer iteration;
    - SVM: the hinge loss depends on each label, so its problems are built once per outer iteration (labels as
      constants);
    - mistreatment (convex-concave): the problem of one outer iteration (labels, weights a_i, signs as constants) is
      built once and re-solved in every CCP iteration with the linearisation (two d-vectors) and tau as Parameters;
      the max(0, -m_i) terms enter through auxiliary t_i >= max(0, -m_i) with non-negative coefficients, which leaves
      the feasible set of w unchanged.

    w is searched in the row space of X (w = V beta, V the right singular vectors of X with non-zero singular
    values): the loss and the constraints read w only through X w (every constraint row is a row of X), so the
    optimum is the same, but one-hot columns that sum to the intercept no longer leave the unregularised
    problem with a flat direction (which interior-point solvers report as `optimal_inaccurate`).

    `sets`: (X_S, z_S, c_S) per constraint; the labels y_S of each set are given to `solve` (they change with y_u)."""

    def __init__(self, X: np.ndarray, sets: list[tuple], cfg):
        import cvxpy as cp

        self.cfg = cfg
        _, sv, Vt = np.linalg.svd(X, full_matrices=False)
        self.V = Vt[sv > sv[0] * 1e-10].T if len(sv) and sv[0] > 0 else np.eye(X.shape[1])
        self.Xr = X @ self.V
        n, d = self.Xr.shape
        self.w = cp.Variable(d)
        self.score = self.Xr @ self.w
        self.sets = [(Xs @ self.V, np.asarray(zs, float), float(c)) for Xs, zs, c in sets]
        self.di_cons, self.di = [], []
        if cfg.fairness == "di":
            for Xs, zs, c in self.sets:
                a = di_vector(Xs, zs)
                self.di_cons += [a @ self.w <= c, -(a @ self.w) <= c]
                self.di.append((a, c))
        if cfg.model == "lr":
            self.g = cp.Parameter(d)
            self.lr_loss = self._regularised((cp.sum(cp.logistic(self.score)) - self.g @ self.w) / n)
            self.lr_free = cp.Problem(cp.Minimize(self.lr_loss))
            self.lr_di = cp.Problem(cp.Minimize(self.lr_loss), self.di_cons) if self.di_cons else None

    def _regularised(self, loss):
        import cvxpy as cp

        return loss + self.cfg.l2 / 2 * cp.sum_squares(self.w) if self.cfg.l2 > 0 else loss

    def _loss(self, y: np.ndarray):
        """The loss at labels y: LR re-sets g = X^T y of the compiled loss; SVM builds the hinge with y as constants."""
        import cvxpy as cp

        if self.cfg.model == "lr":
            self.g.value = self.Xr.T @ y
            return self.lr_loss
        return self._regularised(cp.sum(cp.pos(1 - cp.multiply(2.0 * y - 1.0, self.score))) / len(y))

    def solve(self, y: np.ndarray, set_labels: list[np.ndarray], warm: np.ndarray | None = None) -> Solve:
        """Solve with labels y (all rows) and y_S per set; `warm` (a w) starts the convex-concave procedure."""
        import cvxpy as cp

        y = np.asarray(y, float)
        loss = self._loss(y)
        lr = self.cfg.model == "lr"
        d = self.V.shape[1]
        free = (lambda: self.lr_free) if lr else (lambda: cp.Problem(cp.Minimize(loss)))
        if not self.sets or self.cfg.fairness == "di":
            return self._convex(y, free, (self.lr_di if lr else cp.Problem(cp.Minimize(loss), self.di_cons))
                                if self.di_cons else None)
        beta, terms, done = self._ccp_start(y, free, warm, set_labels)
        if done is not None:
            return done
        if lr and ccp_solver(self.cfg, len(y)) == "newton_qp":
            return self._ccp_newton_qp(beta, terms, y)
        cons, slacks, lins = [], [], []
        for Xs, ys, a, c in terms:  # the rows S' of each set, their signed labels and weights (constants here)
            if not len(a):
                continue
            pos, neg = a > 0, a < 0
            t = cp.Variable(len(a), nonneg=True)  # t_i >= max(0, -m_i) = -min(0, m_i), m_i = yt_i x_i.w
            lin_pos, lin_neg = cp.Parameter(d), cp.Parameter(d)  # the linearised concave part, as a d-vector
            s1, s2 = cp.Variable(nonneg=True), cp.Variable(nonneg=True)
            cons += [t >= -cp.multiply(ys, Xs @ self.w),
                     lin_pos @ self.w + (-a * neg) @ t <= c + s1,   # Cov <= c
                     lin_neg @ self.w + (a * pos) @ t <= c + s2]    # -Cov <= c
            slacks += [s1, s2]
            lins.append((Xs, ys, a, lin_pos, lin_neg))
        tau = cp.Parameter(nonneg=True)
        problem = cp.Problem(cp.Minimize(loss + tau * cp.sum(cp.hstack(slacks))), cons)

        def linearise(beta):
            for Xs, ys, a, lin_pos, lin_neg in lins:
                active = (ys * (Xs @ beta)) < 0  # where min(0, yt x.w) is the linear branch at w_k
                # Cov = sum_{a>0} a g (concave) + sum_{a<0} |a| (-g) (convex): linearise the concave part at w_k
                lin_pos.value = Xs.T @ (a * active * (a > 0) * ys)
                lin_neg.value = Xs.T @ (-a * active * (a < 0) * ys)

        return self._ccp(beta, terms, problem, loss, slacks, tau, linearise)

class ParametricWStep(_WStep):
    """The w-step of a small run (at most `PARAMETRIC_ROWS` rows), compiled once per run and re-solved in every outer
    iteration (and CCP iteration) with new labels and linearisation points: the labels, signs and weights enter as
    cvxpy Parameters with one entry per row (DPP), so cvxpy canonicalises the problem once per run instead of once
    per solve. (Such Parameters make cvxpy's DPP tensors grow with the square of the rows: `LargeWStep` above.)

    w is searched in the row space of X (w = V beta, V the right singular vectors of X with non-zero singular
    values): the loss and the constraints read w only through X w (every constraint row is a row of X), so the
    optimum is the same, but one-hot columns that sum to the intercept no longer leave the unregularised
    problem with a flat direction (which interior-point solvers report as `optimal_inaccurate`).

    `sets`: (X_S, z_S, c_S) per constraint; the labels y_S of each set are given to `solve` (they change with y_u).
    The mistreatment constraint max(0, -m_i) terms enter through auxiliary t_i >= max(0, -m_i) with non-negative
    coefficients, which leaves the feasible set of w unchanged and keeps the problem DPP."""

    def __init__(self, X: np.ndarray, sets: list[tuple], cfg):
        import cvxpy as cp

        self.cfg = cfg
        _, sv, Vt = np.linalg.svd(X, full_matrices=False)
        self.V = Vt[sv > sv[0] * 1e-10].T if len(sv) and sv[0] > 0 else np.eye(X.shape[1])
        self.Xr = Xr = X @ self.V
        n, d = Xr.shape
        self.w = w = cp.Variable(d)
        self.target = cp.Parameter(n)  # y (LR) or 2y - 1 (SVM)
        score = Xr @ w
        if cfg.model == "lr":
            loss = (cp.sum(cp.logistic(score)) - self.target @ score) / n
        else:
            loss = cp.sum(cp.pos(1 - cp.multiply(self.target, score))) / n
        if cfg.l2 > 0:
            loss = loss + cfg.l2 / 2 * cp.sum_squares(w)
        self.loss = loss
        self.sets = [(Xs @ self.V, np.asarray(zs, float), float(c)) for Xs, zs, c in sets]
        self.free = cp.Problem(cp.Minimize(loss))
        self.problem, self.di = None, []
        if not self.sets:
            return
        if cfg.fairness == "di":
            cons = []
            for Xs, zs, c in self.sets:
                a = di_vector(Xs, zs)
                cons += [a @ w <= c, -(a @ w) <= c]
                self.di.append((a, c))
            self.problem = cp.Problem(cp.Minimize(loss), cons)
            return
        cons, self.slacks, self.params = [], [], []
        for Xs, _, c in self.sets:
            m = len(Xs)
            sgn = cp.Parameter(m)
            lin_pos, lin_neg = cp.Parameter(m), cp.Parameter(m)
            cvx_pos, cvx_neg = cp.Parameter(m, nonneg=True), cp.Parameter(m, nonneg=True)
            t = cp.Variable(m, nonneg=True)  # t_i >= max(0, -m_i) = -min(0, m_i), m_i = yt_i x_i.w
            s1, s2 = cp.Variable(nonneg=True), cp.Variable(nonneg=True)
            xw = Xs @ w
            cons += [t >= -cp.multiply(sgn, xw),
                     lin_pos @ xw + cvx_neg @ t <= c + s1,   # Cov <= c
                     lin_neg @ xw + cvx_pos @ t <= c + s2]   # -Cov <= c
            self.slacks += [s1, s2]
            self.params.append((sgn, lin_pos, lin_neg, cvx_pos, cvx_neg))
        self.tau = cp.Parameter(nonneg=True)
        self.problem = cp.Problem(cp.Minimize(loss + self.tau * cp.sum(cp.hstack(self.slacks))), cons)

    def solve(self, y: np.ndarray, set_labels: list[np.ndarray], warm: np.ndarray | None = None) -> Solve:
        """Solve with labels y (all rows) and y_S per set; `warm` (a w) starts the convex-concave procedure."""
        y = np.asarray(y, float)
        self.target.value = y if self.cfg.model == "lr" else 2.0 * y - 1.0
        if self.problem is None or self.cfg.fairness == "di":
            return self._convex(y, lambda: self.free, self.problem)
        beta, terms, done = self._ccp_start(y, lambda: self.free, warm, set_labels)
        if done is not None:
            return done
        if self.cfg.model == "lr" and ccp_solver(self.cfg, len(y)) == "newton_qp":
            return self._ccp_newton_qp(beta, terms, y)
        full = []  # per set: signed labels and weights a_i over all rows of S (0 outside S')
        for (Xs, zs, _), ys in zip(self.sets, set_labels, strict=True):
            yt = 2.0 * np.asarray(ys, float) - 1.0
            keep = {"omr": np.ones(len(yt), bool), "fpr": yt < 0, "fnr": yt > 0}[self.cfg.fairness]
            a = np.zeros(len(yt))
            if keep.any():
                zk = zs[keep]
                a[keep] = (zk - zk.mean()) / (keep.sum() if dm_scaling(self.cfg) == "mean" else 1.0)
            full.append((Xs, yt, a))

        def linearise(beta):
            for (Xs, yt, a), (sgn, lin_pos, lin_neg, cvx_pos, cvx_neg) in zip(full, self.params, strict=True):
                active = (yt * (Xs @ beta)) < 0  # where min(0, yt x.w) is the linear branch at w_k
                pos, neg = a > 0, a < 0
                # Cov = sum_{a>0} a g (concave) + sum_{a<0} |a| (-g) (convex): linearise the concave part at w_k
                sgn.value = yt
                lin_pos.value = a * active * pos * yt
                lin_neg.value = -a * active * neg * yt
                cvx_pos.value = a * pos
                cvx_neg.value = -a * neg

        return self._ccp(beta, terms, self.problem, self.loss, self.slacks, self.tau, linearise)


PARAMETRIC_ROWS = 3000  # rows up to which the w-step takes per-row Parameters (ParametricWStep)


def WStep(X: np.ndarray, sets: list[tuple], cfg):  # noqa: N802  (a factory: the w-step object of one run)
    """The w-step of one run over the rows X with constraint sets (X_S, z_S, c_S): `ParametricWStep` (compiled once
    per run) up to `PARAMETRIC_ROWS` rows, `LargeWStep` above. Both solve the same problem; they differ in what
    cvxpy compiles once, and so in the solver's rounding."""
    return (ParametricWStep if len(X) <= PARAMETRIC_ROWS else LargeWStep)(X, sets, cfg)


# ---------------------------------------------------------------------------------------------- plugins
class FairLinear(Plugin):
    """Shared by fair_ssl_lr / fair_ssl_svm and zafar.py's two plugins: standardisation, prediction, the solver's
    status (`failed`: the evaluation, `evaluate.fair_linear`, is N/A)."""

    kind = "semi_supervised"
    evaluation = "fair_linear"
    private = False
    guarantee = "none"
    Config = FairLinearConfig

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        return np.hstack([(X - self.mean) / self.scale, np.ones((len(X), 1))])

    def _fit_scaler(self, X: np.ndarray) -> None:
        self.mean = X.mean(0)
        sd = X.std(0)
        self.scale = np.where(sd > 0, sd, 1.0)

    @staticmethod
    def _parts(data):
        if data.s is None:
            raise DataError(f"data={data.name}: fairness constraints need a protected attribute (data.sensitive)")
        lab = data.y >= 0
        if not lab.any():
            raise DataError(f"data={data.name}: no labelled training rows")
        return lab

    def decision(self, X) -> np.ndarray:
        return self._standardise(np.asarray(X, float)) @ self.w

    def predict(self, X) -> np.ndarray:
        return (self.decision(X) >= 0).astype(int)  # sigma(w.x) >= 0.5 (LR) and w.x >= 0 (SVM) coincide

    def _record(self, sol: Solve) -> None:
        self.statuses.append(sol.status)
        self.w = sol.w
        if not sol.ok and self.failed is None:
            self.failed = sol.status
            self.warn(f"{self.name}: the w-step solver ended with status {sol.status!r}: accuracy and "
                      f"discrimination are N/A (spec §8.9)")

    def extra_metrics(self) -> dict[str, float]:
        return {"solver_ok": float(self.failed is None), "solver_solves": float(len(self.statuses))}


@register
class FairSSLLR(FairLinear):
    name = "fair_ssl_lr"
    Config = FairSSLConfig

    def _sets(self, n_l: int) -> list[tuple[slice, float]]:
        """The rows (labelled rows first) and threshold of each constraint of the scope (spec §1.3a)."""
        cfg = self.cfg
        c1 = cfg.c if cfg.c1 is None else cfg.c1
        c2 = cfg.c if cfg.c2 is None else cfg.c2
        lab, unl = slice(0, n_l), slice(n_l, None)
        return {"labeled": [(lab, cfg.c)], "unlabeled": [(unl, cfg.c)], "combined": [(lab, c1), (unl, c2)],
                "mixed": [(slice(None), cfg.c)]}[cfg.constraint_scope]

    def fit(self, data, budget, ledger, rng, device="cpu"):
        cfg, g = self.cfg, self.cfg.graph
        lab = self._parts(data)
        pool = np.flatnonzero(~lab)
        if cfg.unlabelled_used is not None and cfg.unlabelled_used > len(pool):
            raise DataError(f"algo.unlabelled_used={cfg.unlabelled_used} is more than the {len(pool)} unlabelled rows "
                            f"of data={data.name}; allowed: 0-{len(pool)} or null (all of them)")
        if cfg.unlabelled_used is not None and cfg.unlabelled_used < len(pool):  # Figs. 5.2 / 5.6: |D_u| varies
            pool = np.sort(rng.choice(pool, cfg.unlabelled_used, replace=False))
        order = np.concatenate([np.flatnonzero(lab), pool])  # labelled rows first
        n_l, n_u = int(lab.sum()), len(pool)
        if n_u == 0 and cfg.constraint_scope in ("unlabeled", "combined"):
            raise DataError(f"algo.constraint_scope={cfg.constraint_scope} needs unlabelled rows and data="
                            f"{data.name} gives none; allowed without them: labeled, mixed "
                            f"(or data.unlabelled_size > 0)")
        check_graph_fits(n_l + n_u, n_u, g)
        self._fit_scaler(data.X[order])
        X = self._standardise(data.X[order])
        z = data.s[order].astype(float)
        y_l = data.y[order][:n_l].astype(int)
        t0 = time.perf_counter()
        self.sigma, graph = factorised_graph(X[:, :-1], n_l, g)
        self.graph_seconds = time.perf_counter() - t0
        self.zero_degree = graph.zero_degree_fraction()
        self.ridge_used = graph.ridge_used
        if self.zero_degree > 0:
            self.warn(f"{self.name}: {self.zero_degree:.1%} of the unlabelled rows have zero degree in the graph "
                      f"(sigma={self.sigma:g}; spec §8.11): their labels come from the classifier alone")
        self.statuses, self.failed = [], None
        y_u = (graph.harmonic(y_l) >= cfg.T).astype(int) if n_u else np.zeros(0, int)
        sets = self._sets(n_l)
        step = WStep(X, [(X[rows], z[rows], c) for rows, c in sets], cfg)  # compiled once, re-solved below
        prev_obj, self.outer = np.inf, 0
        for self.outer in range(1, cfg.max_outer + 1):
            y = np.concatenate([y_l, y_u])
            sol = step.solve(y, [y[rows] for rows, _ in sets])
            self._record(sol)
            self.y_fit = y  # the labels the current w was fitted on
            if not sol.ok or not n_u:
                break
            score_u = X[n_l:] @ self.w
            if cfg.yu_update == "printed":  # Eq. 5.16 as printed (sign error, §8.2), for debugging only
                log_p, log_q = -np.logaddexp(0, -score_u), -np.logaddexp(0, score_u)  # ln p, ln(1 - p)
                soft = graph.solve(graph.A[n_l:, :n_l] @ y_l.astype(float) - (log_p + log_q) / (2 * cfg.alpha))
            else:
                soft = graph.propagate(y_l, score_u, cfg.alpha)
            new = (soft >= cfg.T).astype(int)
            obj = self._objective(X, np.concatenate([y_l, new]), graph)
            changed = np.any(new != y_u)
            y_u = new
            if not changed or abs(prev_obj - obj) <= cfg.tol * max(abs(obj), 1e-12):
                break
            prev_obj = obj
        self.y_u = y_u
        return self

    def _objective(self, X, y, graph) -> float:
        """Eq. 5.12 at the current w: summed loss + alpha y^T L y."""
        s = X @ self.w
        if self.cfg.model == "lr":
            loss = np.sum(np.logaddexp(0, s) - y * s)
        else:
            loss = np.sum(np.maximum(0, 1 - (2 * y - 1) * s))
        return float(loss + self.cfg.alpha * graph.smoothness(y))

    def extra_metrics(self) -> dict[str, float]:
        return super().extra_metrics() | {
            "unlabelled_used": float(len(self.y_u)), "zero_degree_fraction": self.zero_degree,
            "sigma": float(self.sigma), "ridge_used": float(self.ridge_used), "outer_iterations": float(self.outer),
            "graph_seconds": float(self.graph_seconds),
            "y_u_positive_rate": float(self.y_u.mean()) if len(self.y_u) else float("nan")}


@register
class FairSSLSVM(FairSSLLR):
    name = "fair_ssl_svm"

