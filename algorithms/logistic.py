"""`lr`: plain, non-private, fairness-unaware logistic regression (pflr.md §2.1; thesis §8.4.1, Eq. 3.9).

Minimises the exact objective sum_i log(1 + exp(x_i^T w)) - y_i x_i^T w with an intercept (`intercept: false`
drops it, as the thesis' formulas do, pflr.md A6; with one-hot blocks both give the same classifier), by Newton
trust-region steps (L-BFGS for d > 200) to convergence. Deviation: a tiny L2 penalty `l2` (default 1e-6,
pflr.md §2.1 allows it) keeps the optimum finite on separable data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from threadpoolctl import threadpool_limits

from privfair_cli.registry import Plugin, register
from privfair_cli.typed import bounds

NEWTON_MAX_D = 200


def with_intercept(X: np.ndarray) -> np.ndarray:
    return np.hstack([X, np.ones((X.shape[0], 1))])


def fit_logistic(X: np.ndarray, y: np.ndarray, l2: float = 1e-6, intercept: bool = True) -> np.ndarray:
    """Weights (intercept last, when `intercept`) of the exact logistic loss: Newton trust-region steps with
    the exact d x d Hessian for d <= NEWTON_MAX_D (a few X^T W X products), L-BFGS beyond."""
    Xb = with_intercept(X) if intercept else X

    def loss(w):
        z = Xb @ w
        f = np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * l2 * w @ w
        g = Xb.T @ (expit(z) - y) + l2 * w
        return f, g

    def hess(w):
        p = expit(Xb @ w)
        return (Xb * (p * (1 - p))[:, None]).T @ Xb + l2 * np.eye(len(w))

    w0 = np.zeros(Xb.shape[1])
    with threadpool_limits(1):  # n x d with small d: threaded BLAS only adds contention
        if Xb.shape[1] <= NEWTON_MAX_D:
            res = minimize(loss, w0, jac=True, hess=hess, method="trust-exact", options={"gtol": 1e-8})
        else:
            res = minimize(loss, w0, jac=True, method="L-BFGS-B", options={"maxiter": 1000, "gtol": 1e-8})
    return res.x


@dataclass(frozen=True)
class LRConfig:
    l2: float = field(metadata=bounds(ge=0))
    intercept: bool


@register
class LogisticRegression(Plugin):
    name = "lr"
    kind = "classifier"
    private = False
    Config = LRConfig
    needs = ("binary_label", "features")

    def fit(self, data, budget, ledger, rng, device="cpu"):
        self.w = fit_logistic(data.X, data.y, l2=self.cfg.l2, intercept=self.cfg.intercept)
        return self

    def predict_proba(self, X):
        return expit((with_intercept(X) if self.cfg.intercept else X) @ self.w)

    def predict(self, X):
        return (self.predict_proba(X) >= 0.5).astype(int)


