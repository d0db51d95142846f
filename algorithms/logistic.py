"""`lr`: plain, non-private, fairness-unaware logistic regression (pflr.md §2.1; thesis §8.4.1, Eq. 3.9).

Minimises the exact objective sum_i log(1 + exp(x_i^T w)) - y_i x_i^T w with an intercept, by L-BFGS to
convergence. Deviation: a tiny L2 penalty `l2` (default 1e-6, pflr.md §2.1 allows it) keeps the optimum
finite on separable data.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

from privfair_cli.registry import Plugin, register


def with_intercept(X: np.ndarray) -> np.ndarray:
    return np.hstack([X, np.ones((X.shape[0], 1))])


def fit_logistic(X: np.ndarray, y: np.ndarray, l2: float = 1e-6, sample_weight=None) -> np.ndarray:
    """Weights (intercept last) of the exact logistic loss, by L-BFGS with the analytic gradient."""
    Xb = with_intercept(X)
    w8 = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, float)

    def loss(w):
        z = Xb @ w
        f = np.sum(w8 * (np.logaddexp(0.0, z) - y * z)) + 0.5 * l2 * w @ w
        g = Xb.T @ (w8 * (expit(z) - y)) + l2 * w
        return f, g

    res = minimize(loss, np.zeros(Xb.shape[1]), jac=True, method="L-BFGS-B",
                   options={"maxiter": 1000, "gtol": 1e-8})
    return res.x


@register
class LogisticRegression(Plugin):
    name = "lr"
    kind = "classifier"
    private = False

    def fit(self, data, budget, ledger, rng, device="cpu"):
        self.w = fit_logistic(data.X, data.y, l2=float(self.params.get("l2", 1e-6)))
        return self

    def predict_proba(self, X):
        return expit(with_intercept(X) @ self.w)

    def predict(self, X):
        return (self.predict_proba(X) >= 0.5).astype(int)


