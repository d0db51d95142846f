"""RON-Gauss (Chanyaswad, Liu, Mittal 2019), the class-wise GMM variant for a binary label (ffpdg.md §1 steps 4-9,
§3): a private generator over a discrete table, shared by every pipeline that needs one (`ffpdg`).

Per class c of the label (the classes are disjoint, so one release covers both by parallel composition):
4. encode every other attribute: a two-level one as one 0/1 column (`binary_decoding: quantile`, the seed's) or,
   like every wider one, as a one-hot block plus U(0, `white_noise`) noise renormalised to sum 1 (TGAN's "white
   noise", F9); every row scaled to unit L2 norm;
5. mu_c = (sum_i x_i + Lap(2 sqrt(d) / eps_mu)) / n_c: one Laplace release of both classes' sums through the
   ledger (replacing one row moves the stacked sums by at most 2 in L2, 2 sqrt(d) in L1; the seed's scale
   2 sqrt(d) / (n eps_mu) on the mean, F5); centre, re-normalise rows (step 6);
7. W_c = the first p columns of Q of a uniform [0, 1) d x d matrix (W^T W = I_p); x' = W_c^T x;
8. Sigma_c = (sum_i x' x'^T + Lap(s / eps_sigma)) / n_c, s = 2 sqrt(p) (`cov_sensitivity: seed`) or 2 p (`safe`,
   the entrywise L1 bound, F6), one release of both classes; symmetrised, eigenvalues clipped at 0 (F7);
   n'_c samples of N(W_c^T mu_c, Sigma_c), mapped back as W_c x (step 9);
9. decode: a 0/1 column is 1 at or above the (1 - pi_j) quantile of its synthetic column, pi_j = the share of ones
   in the input (raw: `binary_decoding: quantile`); a one-hot block by argmax (no statistic of the data).
n_c and n'_c: the input's class counts (`class_counts: exact`, n'_c = round(n' n_c / n), the reference code's
and, after FairMaxEnt, the spec's pi~_c) or one Laplace release of both counts (sensitivity 2) at `count_share`
of eps (`noisy`). Budget: eps_mu + eps_sigma (+ eps_count) = eps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privfair_cli.errors import ConfigError
from privfair_cli.privacy.mechanisms import laplace


@dataclass(frozen=True)
class Settings:
    p: int | None = None  # projection dimension; None = d - 1 (F8)
    eps_mu_share: float = 0.3
    cov_sensitivity: str = "safe"
    class_counts: str = "exact"
    count_share: float = 0.1
    binary_decoding: str = "quantile"
    white_noise: float = 0.2


def encode(X: np.ndarray, domain: list[int], cols: list[int], binary_decoding: str, white_noise: float,
           rng: np.random.Generator) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Step 4 before the row scaling: the encoded matrix and its blocks (attribute column, start, width)."""
    parts, blocks, start = [], [], 0
    for j in cols:
        c = domain[j]
        if c <= 2 and binary_decoding == "quantile":
            parts.append(X[:, j:j + 1].astype(float))
            blocks.append((j, start, 1))
            start += 1
            continue
        onehot = (X[:, j:j + 1] == np.arange(c)[None, :]).astype(float)
        if white_noise > 0:
            onehot += rng.uniform(0, white_noise, size=onehot.shape)
            onehot /= onehot.sum(axis=1, keepdims=True)
        parts.append(onehot)
        blocks.append((j, start, c))
        start += c
    return np.hstack(parts), blocks


def unit_rows(Z: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(Z, axis=1, keepdims=True)
    return Z / np.where(norm > 0, norm, 1.0)


def projection(d: int, p: int, rng: np.random.Generator) -> np.ndarray:
    """W: the first p columns of Q of a uniform [0, 1) d x d matrix (step 7); W^T W = I_p."""
    Q, _ = np.linalg.qr(rng.random((d, d)))
    return Q[:, :p]


def psd(S: np.ndarray) -> np.ndarray:
    """Symmetrise and clip negative eigenvalues at 0 (F7, post-processing)."""
    S = (S + S.T) / 2
    vals, vecs = np.linalg.eigh(S)
    return (vecs * np.clip(vals, 0, None)) @ vecs.T


def generate(X: np.ndarray, domain: list[int], y_col: int, n_out: int, eps: float, settings: Settings,
             rng: np.random.Generator, ledger) -> np.ndarray:
    """n_out synthetic rows (codes over `domain`) from the codes X, spending eps through the ledger."""
    cols = [j for j in range(len(domain)) if j != y_col]
    Z, blocks = encode(X, domain, cols, settings.binary_decoding, settings.white_noise, rng)
    d = Z.shape[1]
    p = d - 1 if settings.p is None else settings.p
    if not 1 <= p < d:
        raise ConfigError(f"RON-Gauss needs 1 <= p < d: algo.p={p} but the encoded table has d={d} columns "
                          f"(allowed: 1 .. {d - 1}, or null for d - 1)")
    Z = unit_rows(Z)
    y = X[:, y_col]
    classes = np.arange(domain[y_col])
    counts = np.bincount(y, minlength=len(classes)).astype(float)
    eps_count = settings.count_share * eps if settings.class_counts == "noisy" else 0.0
    eps_mu = settings.eps_mu_share * (eps - eps_count)
    eps_sigma = eps - eps_count - eps_mu
    if settings.class_counts == "noisy":
        counts = laplace(counts, 2.0, eps_count, rng, ledger, note="RON-Gauss class counts (eps_count)")
    n_c = np.maximum(counts, 1.0)
    share = np.clip(counts, 0, None)
    share = share / share.sum() if share.sum() > 0 else np.full(len(classes), 1 / len(classes))
    n_syn = np.floor(n_out * share + 0.5).astype(int)
    n_syn[-1] = max(0, n_out - n_syn[:-1].sum())

    sums = np.stack([Z[y == c].sum(axis=0) for c in classes])
    sums = laplace(sums, 2 * math.sqrt(d), eps_mu, rng, ledger, note=f"RON-Gauss class sums, d={d} (eps_mu)")
    mu = sums / n_c[:, None]
    Ws = [projection(d, p, rng) for _ in classes]
    second = []
    for c, W in zip(classes, Ws, strict=True):
        Xp = unit_rows(Z[y == c] - mu[c]) @ W
        second.append(Xp.T @ Xp)
    sens = 2 * math.sqrt(p) if settings.cov_sensitivity == "seed" else 2.0 * p
    second = laplace(np.stack(second), sens, eps_sigma, rng, ledger,
                     note=f"RON-Gauss class second moments, p={p}, {settings.cov_sensitivity} sensitivity (eps_sigma)")
    out_Z, out_y = [], []
    for c, W in zip(classes, Ws, strict=True):
        if n_syn[c] == 0:
            continue
        S = psd(second[c] / n_c[c])
        x = rng.multivariate_normal(W.T @ mu[c], S, size=int(n_syn[c]), method="eigh")
        out_Z.append(x @ W.T)
        out_y.append(np.full(int(n_syn[c]), c))
    Zs = np.vstack(out_Z) if out_Z else np.zeros((0, d))
    out = np.zeros((len(Zs), len(domain)), dtype=np.int64)
    out[:, y_col] = np.concatenate(out_y) if out_y else []
    for j, start, width in blocks:
        block = Zs[:, start:start + width]
        if width == 1:
            pi = float(np.mean(X[:, j] == 1))
            cut = np.quantile(block[:, 0], 1 - pi) if len(block) else 0.0
            out[:, j] = (block[:, 0] >= cut).astype(int) if pi > 0 else 0
        else:
            out[:, j] = np.argmax(block, axis=1)
    return out
