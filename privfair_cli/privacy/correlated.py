"""Correlated differential privacy (Zhu et al. 2015; crfs.md §0): the correlated degree matrix of the records,
the correlated / group sensitivity it gives, and the two releases calibrated to it.

- `degree_matrix(X)`: Theta, the Pearson correlation between records (rows) over the columns in use (Eq. 3.4):
  centre each row, divide by its L2 norm, Theta = Xn Xn^T; a zero-variance row is correlated with itself only.
- `kappas(X, theta0)`: kappa_CS = max_i sum_j |theta~_ij| (Eq. 3.5-3.6, theta~_ij = theta_ij if theta_ij >= theta0
  else 0, theta~_ii = 1) and kappa_GS = max_i #{j : theta_ij >= theta0} (the group size, §0.3), computed in
  blocks of rows so that Theta is never held whole (N x block floats at a time).
  The correlated sensitivity of a query whose records all have individual sensitivity Delta is kappa * Delta.
- `correlated_laplace(value, delta, kappa, eps, ...)`: value + Lap(kappa Delta / eps) per coordinate (Eq. 3.7),
  recorded in the ledger as one eps-DP release of L1 sensitivity kappa Delta. A workload of Q answers calibrated
  one by one (the seed's per-answer scale) is recorded at Q eps (`answers_composed`): basic composition over the
  answers, since one record may enter every answer.
- `correlated_output_perturbation(w, n, lam, kappa, eps, ...)`: Chaudhuri, Monteleoni & Sarwate (2011) output
  perturbation of a lam-regularised ERM with a 1-Lipschitz loss on rows of norm <= 1: L2 sensitivity
  2 kappa / (n lam); noise b with density proportional to exp(-eps |b|_2 / Delta_2) (|b| ~ Gamma(d, Delta_2 / eps),
  uniform direction); eps-DP. Several draws at once (`draws`) are several releases, each recorded.

With theta0 = 1 and no two records perfectly correlated, kappa = 1 and both releases are the ordinary mechanisms
(the same noise, draw for draw). Theta is computed from the data: under the correlated-DP threat model it is the
adversary's knowledge; the plugins say that it is itself not protected (crfs.md §1.4).
"""

from __future__ import annotations

import math

import numpy as np

from privfair_cli.privacy.ledger import PrivacyLedger
from privfair_cli.privacy.noise import noise_source

BLOCK = 1024  # rows of Theta formed at a time
TOL = 1e-9  # theta_ij >= theta0 - TOL passes: a correlation exactly at the threshold is not lost to rounding


def normalised_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows centred and scaled to unit L2 norm, and the mask of zero-variance rows (left as zeros)."""
    X = np.asarray(X, dtype=float)
    Xc = X - X.mean(axis=1, keepdims=True)
    norm = np.linalg.norm(Xc, axis=1)
    flat = norm <= 1e-12 * max(1.0, float(np.abs(X).max(initial=0.0)))
    Xn = np.divide(Xc, norm[:, None], out=np.zeros_like(Xc), where=~flat[:, None])
    return Xn, flat


def degree_matrix(X: np.ndarray) -> np.ndarray:
    """Theta (N x N): Pearson correlation between rows of X (Eq. 3.4), clipped to [-1, 1], theta_ii = 1."""
    Xn, _ = normalised_rows(X)
    theta = np.clip(Xn @ Xn.T, -1.0, 1.0)
    np.fill_diagonal(theta, 1.0)
    return theta


def threshold(theta: np.ndarray, theta0: float, abs_threshold: bool = False) -> np.ndarray:
    """theta~ (Eq. 3.5): theta_ij where theta_ij >= theta0 (|theta_ij| >= theta0 with `abs_threshold`), else 0;
    the diagonal stays 1."""
    keep = (np.abs(theta) if abs_threshold else theta) >= theta0 - TOL
    out = np.where(keep, theta, 0.0)
    np.fill_diagonal(out, 1.0)
    return out


def kappas(X: np.ndarray, theta0: float, abs_threshold: bool = False, block: int = BLOCK) -> dict[str, float]:
    """kappa_CS, kappa_GS and the mean |theta_ij| over i != j (the 'data correlation' of Fig. 3.1) of the rows of X,
    from blocks of Theta. A record's row of Theta depends only on its values, so equal rows are formed once and
    weighted by their count (Adult's 36,178 training rows hold about 20,000 distinct ones: 3x fewer entries); one of
    a row's copies is the record itself, whose theta_ii = 1 replaces the computed value."""
    Xn, _ = normalised_rows(X)
    n = len(Xn)
    U, counts = np.unique(Xn, axis=0, return_counts=True)
    w = counts.astype(float)
    cs = gs = 1.0
    total_abs = 0.0
    for start in range(0, len(U), block):
        rows = np.arange(start, min(len(U), start + block))
        t = np.clip(U[rows] @ U.T, -1.0, 1.0)
        a = np.abs(t)
        keep = (a if abs_threshold else t) >= theta0 - TOL
        own = a[rows - start, rows]  # the computed |theta_uu| of a copy: the record itself counts 1 instead
        own_kept = own * keep[rows - start, rows]
        total_abs += float(w[rows] @ (a @ w - own))
        np.multiply(a, keep, out=a)
        cs = max(cs, float(np.max(a @ w - own_kept + 1.0)))
        gs = max(gs, float(np.max(keep.astype(np.float32) @ w.astype(np.float32) - keep[rows - start, rows] + 1.0)))
    mean_abs = total_abs / (n * (n - 1)) if n > 1 else 0.0
    return {"kappa_cs": cs, "kappa_gs": gs, "mean_abs_corr": mean_abs}


def correlated_laplace(value, delta: float, kappa: float, eps: float, rng, ledger: PrivacyLedger, note: str = "",
                       answers_composed: int = 1):
    """value + Lap(kappa delta / eps) per coordinate (Eq. 3.7). `answers_composed` = Q > 1: the Q coordinates are
    answers calibrated one by one, recorded at Q eps by basic composition."""
    scale = 0.0 if math.isinf(eps) else kappa * delta / eps
    ledger.spend_pure("correlated_laplace", eps * answers_composed, kappa * delta * answers_composed,
                      note or f"kappa={kappa:g}")
    return noise_source(rng).add_laplace(value, scale)


def output_sensitivity(n: int, lam: float, kappa: float = 1.0) -> float:
    """L2 sensitivity of the lam-regularised ERM minimiser (1-Lipschitz loss, rows of norm <= 1): 2 kappa/(n lam)."""
    return 2.0 * kappa / (n * lam)


def gamma_norm_noise(d: int, scale: float, draws: int, rng) -> np.ndarray:
    """`draws` vectors in R^d with density proportional to exp(-|b|_2 / scale): Gamma(d, scale) norm, uniform
    direction."""
    if scale == 0:
        return np.zeros((draws, d))
    gen = noise_source(rng).own_noise_generator("the Gamma-norm noise of output perturbation")
    direction = gen.standard_normal((draws, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    return direction * gen.gamma(d, scale, size=(draws, 1))


def correlated_output_perturbation(w: np.ndarray, n: int, lam: float, kappa: float, eps: float, rng,
                                   ledger: PrivacyLedger | None, note: str = "", draws: int = 1) -> np.ndarray:
    """(draws, d) released weight vectors w + b, b ~ exp(-eps |b| / Delta_2), Delta_2 = 2 kappa / (n lam); each draw
    is an eps-DP release recorded in `ledger` (None: an internal evaluation the caller accounts for itself)."""
    sens = output_sensitivity(n, lam, kappa)
    if ledger is not None:
        for _ in range(draws):
            ledger.spend_pure("correlated_output_perturbation", eps, sens, note or f"kappa={kappa:g}")
    w = np.asarray(w, dtype=float)
    scale = 0.0 if math.isinf(eps) else sens / eps
    return w[None, :] + gamma_norm_noise(len(w), scale, draws, rng)
