"""Fairness pre-processors over a discrete table, shared by every generator family (ffpdg.md §2, §4): each takes the
integer codes `X` (n x k, column j in 0..domain[j]-1), the column of the protected attribute `s_col` and of the
label `y_col`, and returns a `Processed` table: new codes and, for reweighing, per-row weights. None of them is
private: they read the raw table (ffpdg.md §1, "Privacy guarantee"). Not a plugin family: no plugin is registered
here; `PREPROCESSORS` maps the names of the command line (`algo.preprocessor`) to them.

- `fairmaxent` (Celis, Keswani, Vishnoi 2020; ffpdg.md §2): the fair maximum-entropy distribution over the
  enumerated domain Omega, by its dual (damped Newton; the library uses a box-constrained Newton method), then n
  i.i.d. samples from it. Weights w = N_y / (N N_{y,z})
  (label independent of the protected attribute, groups balanced within each label), prior
  q_C = (1 - C) p_w + C u, target mean theta^w (default), theta^d or theta^b (F16). Encoding phi: a two-level
  attribute is one 0/1 coordinate, a wider one is one-hot. The domain is enumerated, so |Omega| is capped
  (`max_domain`).
- `reweighing` (Kamiran & Calders 2012; §4.1): the rows unchanged, weights P(s) P(y) / P(s, y)
  (`kamiran_calders.reweighing_weights`).
- `dir` (Feldman et al. 2015; §4.2): every attribute but the protected one and the label repaired towards the
  median of the groups' quantile functions: x' = (1 - lambda) x + lambda Q_bar(u), Q_bar(u) = median_s Q_s(u),
  u the row's rank quantile in its group (tied rows ranked one by one, as AIF360's repairer does: on discrete
  codes the spec's per-value F_s(x) maps every tied row alike and leaves a binary or ternary attribute unchanged).
  The median of two groups is the lower value (AIF360's `get_median`), so a repaired code is a code; a level
  below 1 rounds to the nearest code.
- `none`: the identity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from privfair_cli.algorithms.kamiran_calders import reweighing_weights
from privfair_cli.errors import DataError
from privfair_cli.metrics import contingency


@dataclass
class Processed:
    """A pre-processor's output: codes (rows may differ from the input's) and optional per-row weights."""

    X: np.ndarray
    weights: np.ndarray | None = None


def _binary(X: np.ndarray, col: int, what: str) -> np.ndarray:
    v = X[:, col]
    if not np.isin(v, (0, 1)).all():
        raise DataError(f"the {what} attribute must be binary (codes 0/1) for a fairness pre-processor")
    return v.astype(int)


# ---------------------------------------------------------------------------------------------- FairMaxEnt
def domain_grid(domain: list[int]) -> np.ndarray:
    """Every point of Omega (|Omega| x k codes), in `np.ravel_multi_index` order."""
    return np.indices(domain).reshape(len(domain), -1).T


def features(codes: np.ndarray, domain: list[int]) -> np.ndarray:
    """phi: one 0/1 coordinate per two-level attribute, one-hot for wider ones (§2 step 1)."""
    blocks = []
    for j, c in enumerate(domain):
        if c <= 2:
            blocks.append(codes[:, j:j + 1].astype(float))
        else:
            blocks.append((codes[:, j:j + 1] == np.arange(c)[None, :]).astype(float))
    return np.hstack(blocks)


NEWTON_STEPS = 100  # FairMaxEnt dual: at most this many Newton steps ...
NEWTON_TOL = 1e-9  # ... stopping once every coordinate of the gradient is below this


@dataclass
class MaxEntFit:
    """The fitted fair distribution over Omega (`p` in `domain_grid` order) and the dual's solution."""

    grid: np.ndarray
    p: np.ndarray
    lam: np.ndarray
    converged: bool


def fairmaxent_fit(X: np.ndarray, domain: list[int], s_col: int, y_col: int, C: float = 0.1,
                   target: str = "weighted", max_domain: int = 100_000) -> MaxEntFit:
    """The fair max-entropy distribution (§2 steps 1-5): KL-closest to q_C with expectation theta."""
    size = int(np.prod(np.asarray(domain, dtype=float)))
    if size > max_domain:
        raise DataError(f"FairMaxEnt enumerates the domain: {size:,} cells over {len(domain)} attributes exceed "
                        f"algo.max_domain={max_domain:,}; use a card with a small `discrete:` view (e.g. "
                        f"data=adult_ffpdg, 504 cells) or raise algo.max_domain")
    s, y = _binary(X, s_col, "protected"), _binary(X, y_col, "label")
    n = len(X)
    grid = domain_grid(domain)
    counts = contingency(X, domain).ravel()
    n_yz = contingency(np.column_stack([y, s]), (2, 2)).ravel()
    n_y = np.bincount(y, minlength=2).astype(float)
    if (n_yz == 0).any():
        raise DataError("FairMaxEnt needs every (label, protected) combination in the data; one is empty")
    w_cell = (n_y[grid[:, y_col]] / n) / n_yz[2 * grid[:, y_col] + grid[:, s_col]]  # w = N_y / (N N_{y,z})
    pw = counts * w_cell
    pw /= pw.sum()
    q = (1 - C) * pw + C / size
    phi = features(grid, domain)
    if target == "weighted":
        theta = pw @ phi
    else:
        theta = (counts / n) @ phi
        if target == "balanced":  # the protected block replaced by the mean of its unique encodings
            start = sum(1 if c <= 2 else c for c in domain[:s_col])
            width = 1 if domain[s_col] <= 2 else domain[s_col]
            theta[start:start + width] = features(np.arange(domain[s_col])[:, None], [domain[s_col]]).mean(axis=0)
    m = phi.shape[1]
    a = 1e-8 / (m * 700**2)
    logq = np.log(q)

    def dual(lam):
        logits = logq + phi @ lam
        lz = logsumexp(logits)
        return lz - lam @ theta + a * lam @ lam, np.exp(logits - lz)

    # Damped Newton on the smooth convex dual (m <= a few dozen coordinates): the Hessian Cov_p(phi) + 2a I is
    # singular along the one-hot blocks' shared direction, so the step is the least-squares (pseudo-inverse) one.
    lam = np.zeros(m)
    value, p = dual(lam)
    converged = False
    for _ in range(NEWTON_STEPS):
        mean = phi.T @ p
        grad = mean - theta + 2 * a * lam
        if np.abs(grad).max() < NEWTON_TOL:
            converged = True
            break
        hess = (phi * p[:, None]).T @ phi - np.outer(mean, mean) + 2 * a * np.eye(m)
        step = np.linalg.lstsq(hess, grad, rcond=1e-12)[0]
        t = 1.0
        while True:  # backtracking (Armijo) line search
            new_value, new_p = dual(lam - t * step)
            if new_value <= value - 1e-4 * t * grad @ step or t < 1e-10:
                break
            t /= 2
        lam, value, p = lam - t * step, new_value, new_p
    logits = logq + phi @ lam
    return MaxEntFit(grid, np.exp(logits - logsumexp(logits)), lam, converged)


def fairmaxent(X: np.ndarray, domain: list[int], s_col: int, y_col: int, rng: np.random.Generator,
               C: float = 0.1, target: str = "weighted", max_domain: int = 100_000) -> Processed:
    """n i.i.d. samples of the fair max-entropy distribution (§2 step 6)."""
    fit = fairmaxent_fit(X, domain, s_col, y_col, C, target, max_domain)
    return Processed(fit.grid[rng.choice(len(fit.p), size=len(X), p=fit.p)])


# ---------------------------------------------------------------------------------------------- reweighing, DIR
def reweighing(X: np.ndarray, s_col: int, y_col: int) -> Processed:
    """The rows as they are, with Kamiran & Calders' weights (§4.1)."""
    return Processed(X.copy(), reweighing_weights(_binary(X, s_col, "protected"), _binary(X, y_col, "label")))


def dir_repair(X: np.ndarray, domain: list[int], s_col: int, y_col: int, level: float = 1.0) -> Processed:
    """The disparate-impact remover on integer codes (§4.2): each attribute but s and y repaired per group. Every
    row of group g gets its rank quantile u = (rank + 1) / n_g within the group (ties broken by row order, as
    AIF360's repairer ranks tied rows one by one) and the value median_h Q_h(u), Q_h(u) = the ceil(u n_h)-th
    smallest value of group h; with two groups the median is the lower of the two (AIF360's `get_median` takes
    the value left of the centre). At level 1 both groups then share one distribution."""
    s = _binary(X, s_col, "protected")
    out = X.copy()
    groups = [np.flatnonzero(s == g) for g in (0, 1)]
    if not all(len(rows) for rows in groups):
        raise DataError("DIR needs rows of both protected groups")
    for j in range(len(domain)):
        if j in (s_col, y_col):
            continue
        ordered = [rows[np.argsort(X[rows, j], kind="stable")] for rows in groups]
        values = [X[rows, j] for rows in ordered]
        for rows in ordered:
            u = (np.arange(len(rows)) + 1) / len(rows)
            q = np.stack([v[np.clip(np.ceil(u * len(v) - 1e-9).astype(int) - 1, 0, len(v) - 1)] for v in values])
            target = np.sort(q, axis=0)[(len(values) - 1) // 2]  # the lower median over the groups
            out[rows, j] = target if level == 1 else np.rint((1 - level) * X[rows, j] + level * target)
    return Processed(out)


PREPROCESSORS = ("none", "reweighing", "dir", "fairmaxent")


def apply(name: str, X: np.ndarray, domain: list[int], s_col: int, y_col: int, rng: np.random.Generator,
          C: float = 0.1, target: str = "weighted", max_domain: int = 100_000, repair_level: float = 1.0) -> Processed:
    """The pre-processor `name` (one of PREPROCESSORS) on the codes X."""
    if name == "none":
        return Processed(X.copy())
    if name == "reweighing":
        return reweighing(X, s_col, y_col)
    if name == "dir":
        return dir_repair(X, domain, s_col, y_col, repair_level)
    if name == "fairmaxent":
        return fairmaxent(X, domain, s_col, y_col, rng, C, target, max_domain)
    raise DataError(f"pre-processor {name!r} is unknown; allowed: {', '.join(PREPROCESSORS)}")


def statistical_rate(y: np.ndarray, s: np.ndarray) -> float:
    """min_{z,z'} P(Y=1|z) / P(Y=1|z') (§2, fairness quantities)."""
    from privfair_cli.metrics import GroupRates

    rates = [r["positive_rate"] for r in GroupRates(y, y, s).by_group().values()]
    return float(min(rates) / max(rates))


def representation_rate(s: np.ndarray) -> float:
    """min_{z,z'} P(z) / P(z')."""
    c = np.bincount(np.asarray(s).astype(int), minlength=2)
    return float(c.min() / c.max())
