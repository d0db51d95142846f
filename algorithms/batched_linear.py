"""K linear classifiers fitted together: one batched Newton solve over K weight vectors (fair_sampling.md §1 step 7,
§9: the K base models of FES are independent small fits on equally sized re-sampled sets).

Objectives (the spec's recommended learners, §1.5, solved to convergence instead of K scikit-learn calls):
- `lr`: C sum_i [log(1 + exp(z_i)) - y_i z_i] + 1/2 |w|^2, the intercept unpenalised — scikit-learn's
  `LogisticRegression(C)` (lbfgs) objective;
- `svm`: C sum_i max(0, 1 - (2 y_i - 1) z_i)^2 + 1/2 |(w, b)|^2, intercept penalised — `LinearSVC(C)`'s default
  (squared hinge, liblinear with intercept_scaling = 1); minimised by generalised Newton steps (Keerthi & DeCoste
  2005) on the active set.
Each iteration forms the K gradients and K (d+1) x (d+1) Hessians with batched matrix products and takes a damped
Newton step per model (Armijo backtracking over a shared grid of step sizes, all K at once).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit
from threadpoolctl import threadpool_limits

MODELS = ("lr", "svm")
STEPS = 0.5 ** np.arange(12)  # backtracking grid
CHUNK_FLOATS = 500_000  # about 4 MB of gathered rows per chunk of models: cache-sized; 80 MB chunks cost 0.5-0.8 s of
# page faults (system time) per K = 200 fit on Adult, for no gain in BLAS speed


def _augment(X: np.ndarray) -> np.ndarray:
    return np.concatenate([X, np.ones(X.shape[:-1] + (1,))], axis=-1)


def _loss_terms(model: str, z: np.ndarray, y: np.ndarray, C: float):
    """Per-row loss, its first and (generalised) second derivative in z, all scaled by C."""
    if model == "lr":
        p = expit(z)
        return C * (np.logaddexp(0.0, z) - y * z), C * (p - y), C * p * (1 - p)
    sign = 2 * y - 1
    margin = np.maximum(0.0, 1 - sign * z)
    return C * margin**2, -2 * C * sign * margin, 2 * C * (margin > 0)


def fit(X: np.ndarray, y: np.ndarray, model: str, C: float, max_iter: int = 100, tol: float = 1e-8,
        W0: np.ndarray | None = None) -> np.ndarray:
    """Weights (K, d + 1), intercept last, of K models fitted on X (K, m, d), y (K, m) in {0, 1}, started from W0
    ((d + 1,) or (K, d + 1); zeros without it: the objectives are strictly convex, so the start changes the number
    of Newton steps, not the solution)."""
    if model not in MODELS:
        raise ValueError(f"model={model!r}; allowed: {', '.join(MODELS)}")
    Xb = _augment(np.asarray(X, dtype=float))
    y = np.asarray(y, dtype=float)
    K, _, p = Xb.shape
    reg = np.ones(p)
    if model == "lr":
        reg[-1] = 0.0
    W = np.zeros((K, p)) if W0 is None else np.array(np.broadcast_to(W0, (K, p)), dtype=float)

    def objective(W_, rows=slice(None)):
        z = np.matmul(Xb[rows], W_[..., None])[..., 0]
        loss, d1, d2 = _loss_terms(model, z, y[rows], C)
        return loss.sum(1) + 0.5 * (W_**2 * reg).sum(1), d1, d2

    f, d1, d2 = objective(W)
    for _ in range(max_iter):
        g = np.matmul(d1[:, None, :], Xb)[:, 0] + reg * W
        H = np.matmul((Xb * d2[..., None]).transpose(0, 2, 1), Xb) + np.diag(reg + 1e-10)  # BLAS-friendly layout
        step = np.linalg.solve(H, g[..., None])[..., 0]
        decrement = (g * step).sum(1)
        if decrement.max() <= tol * max(1.0, np.abs(f).max()):
            break
        # Armijo backtracking: the full Newton step first, halved only for the models it does not serve
        t = np.ones(K)
        f_new, d1_new, d2_new = objective(W - step)
        bad = np.flatnonzero(~(f_new <= f - 1e-4 * decrement))
        for t_try in STEPS[1:]:
            if not len(bad):
                break
            f_b, d1_b, d2_b = objective(W[bad] - t_try * step[bad], bad)
            ok = f_b <= f[bad] - 1e-4 * t_try * decrement[bad]
            last = t_try == STEPS[-1]
            take = bad[ok | last]
            keep = ok | last
            t[take], f_new[take], d1_new[take], d2_new[take] = t_try, f_b[keep], d1_b[keep], d2_b[keep]
            bad = bad[~keep]
        W = W - t[:, None] * step
        f, d1, d2 = f_new, d1_new, d2_new
    return W


def fit_indexed(X: np.ndarray, y: np.ndarray, idx: np.ndarray, model: str, C: float, max_iter: int = 100,
                tol: float = 1e-8, warm_start: bool = True) -> np.ndarray:
    """Weights (K, d + 1) of K models, model k fitted on the rows idx[k] of X (n, d), y (n,); the K sets are
    gathered and solved in chunks of about CHUNK_FLOATS values each, so memory stays bounded for large K.
    With `warm_start` (and K > 1) the first model is solved alone and every model starts from its weights: the K
    sets are re-samplings of one table, so their optima are close and each needs fewer Newton steps (the solutions
    are the same, to the solver's tolerance)."""
    idx = np.asarray(idx)
    per = max(1, CHUNK_FLOATS // max(1, idx.shape[1] * (X.shape[1] + 1)))
    with threadpool_limits(1):  # many small products: threaded BLAS only oversubscribes the cores (30x slower, loaded)
        W0 = fit(X[idx[:1]], y[idx[:1]], model, C, max_iter, tol)[0] if warm_start and len(idx) > 1 else None
        chunks = np.array_split(idx, -(-len(idx) // per))
        return np.concatenate([fit(X[c], y[c], model, C, max_iter, tol, W0) for c in chunks])


def decision(X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Decision values (n, K) of the K models on X (n, d)."""
    return X @ W[:, :-1].T + W[:, -1]


def scores(model: str, X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """(n, K) scores whose vote threshold is 0.5 (lr: probabilities) or 0 (svm: decision values)."""
    z = decision(X, W)
    return expit(z) if model == "lr" else z


def threshold(model: str) -> float:
    return 0.5 if model == "lr" else 0.0
