"""Conditional-independence tests for the PC family (privpc.md §1.2, §3.4, §4, §5), vectorised over tests.

Every test object answers `pvalues(x, y, S)` for a batch of T tests at once: `x`, `y` are (T,) variable
indices and `S` is a (T, ord) array of conditioning sets (one order per call). The PC core in `causal.py`
only talks to this interface, so the private variants plug in as tests:

- `GSquare`: G^2 (or Pearson chi^2) on the data's 3-way tables, pcalg `gSquareDis` semantics including the
  small-sample rule (p-value 1 when n < n_min_factor * df); `df: adaptive` counts only observed rows/columns
  per stratum instead (causal-learn's `gsq`, used for the peer check);
- `NoisyTableGSquare` (`lapmech`): the same statistic on marginals of one noisy full contingency table;
- `FisherZ` (`pc` on Gaussian data, `privpc_star`): partial correlation from a (possibly noisy) correlation
  matrix, pcalg `pcorOrder` + `zStat` + `gaussCItest`.

`distance_scores` is PrivPC's distance score (Eq. 4.1, corrected sign, greedy search), vectorised over tests.
"""

from __future__ import annotations

import numpy as np
from scipy.special import xlogy
from scipy.stats import chi2, norm

_R_CLIP = 0.9999999


def h(x: np.ndarray) -> np.ndarray:
    """x ln x with h(0) = 0."""
    return xlogy(x, x)


def g2_statistic(N: np.ndarray) -> np.ndarray:
    """G^2 = 2 sum_k [sum_ab h(N_kab) - sum_a h(N_ka.) - sum_b h(N_k.b) + h(N_k)] for tables N (T, K, A, B)."""
    return 2 * (h(N).sum((1, 2, 3)) - h(N.sum(3)).sum((1, 2)) - h(N.sum(2)).sum((1, 2)) + h(N.sum((2, 3))).sum(1))


def chi2_statistic(N: np.ndarray) -> np.ndarray:
    """Pearson sum (O - E)^2 / E with E = N_ka. N_k.b / N_k, cells with E = 0 left out."""
    Nk = N.sum((2, 3), keepdims=True)
    E = N.sum(3, keepdims=True) * N.sum(2, keepdims=True) / np.where(Nk > 0, Nk, 1)
    return np.where(E > 0, (N - E) ** 2 / np.where(E > 0, E, 1), 0.0).sum((1, 2, 3))


STATISTICS = {"g2": g2_statistic, "chi2": chi2_statistic}


def adaptive_df(N: np.ndarray) -> np.ndarray:
    """Degrees of freedom from the observed table (causal-learn's rule, without its +1 per empty stratum):
    sum over non-empty strata of (non-empty rows - 1)(non-empty columns - 1)."""
    rows = (N.sum(3) > 0).sum(2)
    cols = (N.sum(2) > 0).sum(2)
    return (np.maximum(rows - 1, 0) * np.maximum(cols - 1, 0)).sum(1)


class TableTest:
    """Shared part of the categorical tests: degrees of freedom, the small-sample rule, p-values from tables.

    Tables are laid out with every axis padded to the largest category count `C`: shape (T, C^ord, C, C);
    padded cells stay empty, which changes neither statistic."""

    def __init__(self, cats, n: int, statistic: str = "g2", n_min_factor: float = 10, df: str = "fixed"):
        self.cats = np.asarray(cats, dtype=np.int64)
        self.C = int(self.cats.max())
        self.n = int(n)
        self.n_vars = len(self.cats)
        self.statistic = STATISTICS[statistic]
        self.n_min_factor = float(n_min_factor)
        if df not in ("fixed", "adaptive"):
            raise ValueError(f"df={df!r}: allowed fixed (pcalg), adaptive (causal-learn)")
        self.df_mode = df

    def tables(self, x, y, S) -> np.ndarray:
        raise NotImplementedError

    def df(self, x, y, S) -> np.ndarray:
        return (self.cats[x] - 1) * (self.cats[y] - 1) * np.prod(self.cats[S], axis=1)

    def computed(self, x, y, S) -> np.ndarray:
        """False where pcalg skips the test (n < n_min_factor * df) and returns p-value 1."""
        return self.n >= self.n_min_factor * self.df(x, y, S)

    def pvalues(self, x, y, S) -> np.ndarray:
        x, y, S = np.asarray(x), np.asarray(y), np.asarray(S, dtype=np.int64).reshape(len(x), -1)
        pv = np.ones(len(x))
        ok = self.computed(x, y, S)
        if ok.any():
            stat, df = self.statistics(x[ok], y[ok], S[ok])
            pv[ok] = np.where(df > 0, chi2.sf(stat, np.maximum(df, 1)), 1.0)
        return pv

    def statistics(self, x, y, S) -> tuple[np.ndarray, np.ndarray]:
        """(statistic, df) per test, from the dense tables."""
        N = self.tables(x, y, S)
        df = self.df(x, y, S) if self.df_mode == "fixed" else adaptive_df(N)
        return self.statistic(N), df

    def valid_cells(self, x, y, S) -> np.ndarray:
        """(T, C^ord, C, C) mask of the cells that exist for each test's categories."""
        C, r = self.C, S.shape[1]
        digits = (np.arange(C**r)[:, None] // C ** np.arange(r)[None, :]) % C  # (C^r, r), digit m = S[m]
        k_ok = (digits[None, :, :] < self.cats[S][:, None, :]).all(2)
        a_ok = np.arange(C)[None, :] < self.cats[x][:, None]
        b_ok = np.arange(C)[None, :] < self.cats[y][:, None]
        return k_ok[:, :, None, None] & a_ok[:, None, :, None] & b_ok[:, None, None, :]


class GSquare(TableTest):
    """G^2 / chi^2 test on integer-coded data `codes` (n, p) with public category counts `cats`."""

    def __init__(self, codes, cats, statistic: str = "g2", n_min_factor: float = 10, df: str = "fixed",
                 max_batch_cells: int = 4_000_000, sparse_cells: int = 3125):
        codes = np.asarray(codes, dtype=np.int64)
        super().__init__(cats, len(codes), statistic, n_min_factor, df)
        self.sparse_cells = sparse_cells
        self.codes = codes
        self.max_batch_cells = max_batch_cells

    def statistics(self, x, y, S) -> tuple[np.ndarray, np.ndarray]:
        """Dense tables while they are small; above `sparse_cells` cells per test (high orders, where most
        strata are empty) the statistic is computed from the observed cells only, batch by batch."""
        if self.C ** (S.shape[1] + 2) <= self.sparse_cells:
            return super().statistics(x, y, S)
        stat, df = np.empty(len(x)), np.empty(len(x))
        step = max(1, self.max_batch_cells // max(self.n, 1))
        for lo in range(0, len(x), step):
            sl = slice(lo, lo + step)
            stat[sl], df[sl] = self._sparse(x[sl], y[sl], S[sl])
        if self.df_mode == "fixed":
            df = self.df(x, y, S)
        return stat, df

    def _sparse(self, x, y, S):
        C, r, t = self.C, S.shape[1], len(x)
        k = (self.codes[:, S] * C ** np.arange(r)).sum(2) + C**r * np.arange(t)[None, :]  # (test, stratum)
        cell, N = np.unique(((k * C + self.codes[:, x]) * C + self.codes[:, y]).ravel(), return_counts=True)
        N = N.astype(float)
        test = cell // (C ** (r + 2))

        def grouped(keys):  # margin counts per distinct key, and the test each belongs to
            u, inv = np.unique(keys, return_inverse=True)
            return np.bincount(inv, weights=N), u

        Nka, ka = grouped(cell // C)
        Nkb, kb = grouped((cell // (C * C)) * C + cell % C)
        Nk, kk = grouped(cell // (C * C))
        per = C ** (r + 1)
        if self.statistic is g2_statistic:
            stat = 2 * (np.bincount(test, h(N), t) - np.bincount(ka // per, h(Nka), t)
                        - np.bincount(kb // per, h(Nkb), t) + np.bincount(kk // C**r, h(Nk), t))
        else:  # Pearson: sum over observed cells of O^2 N_k / (N_ka N_kb), minus n
            e = Nka[np.searchsorted(ka, cell // C)] * Nkb[np.searchsorted(kb, (cell // (C * C)) * C + cell % C)]
            stat = np.bincount(test, N**2 * Nk[np.searchsorted(kk, cell // (C * C))] / e, t) - self.n
        rows = np.bincount(kk // C**r, np.maximum(np.bincount(np.searchsorted(kk, ka // C), minlength=len(kk)) - 1, 0)
                           * np.maximum(np.bincount(np.searchsorted(kk, kb // C), minlength=len(kk)) - 1, 0), t)
        return stat, rows

    def tables(self, x, y, S) -> np.ndarray:
        C, r = self.C, S.shape[1]
        cells = C ** (r + 2)
        out = np.empty((len(x), C**r, C, C))
        step = max(1, self.max_batch_cells // max(self.n, 1))
        radix = C ** np.arange(r)
        for lo in range(0, len(x), step):
            sl = slice(lo, lo + step)
            k = (self.codes[:, S[sl]] * radix).sum(2) if r else 0  # (n, t): stratum of each row per test
            key = (k * C + self.codes[:, x[sl]]) * C + self.codes[:, y[sl]]
            key = key + cells * np.arange(key.shape[1])[None, :]
            t = key.shape[1]
            out[sl] = np.bincount(key.ravel(), minlength=t * cells).reshape(t, C**r, C, C)
        return out


class NoisyTableGSquare(TableTest):
    """`lapmech`'s test: the 3-way tables are marginals of one noisy full table (float32, shape `cats`),
    clipped at 0 after marginalising (privpc.md §4 step 3, P16); the small-sample rule uses the public n."""

    def __init__(self, noisy_table: np.ndarray, n: int, statistic: str = "g2", n_min_factor: float = 10,
                 cache_bytes: float = 1.5e9):
        super().__init__(noisy_table.shape, n, statistic, n_min_factor)
        self.table = noisy_table
        self.cache_bytes = cache_bytes
        self._marginals: dict[tuple[int, ...], np.ndarray] = {tuple(range(self.n_vars)): noisy_table}
        self._clipped: dict[tuple[int, ...], np.ndarray] = {}

    def marginal(self, variables: tuple[int, ...]) -> np.ndarray:
        """Noisy marginal over `variables` (sorted tuple), axes in that order. Variables are summed out one at a
        time, highest index first, and every intermediate is cached (within `cache_bytes`), so requests share
        the expensive first passes over the full table."""
        chain = [tuple(range(self.n_vars))]
        for v in sorted(set(chain[0]) - set(variables), reverse=True):
            chain.append(tuple(u for u in chain[-1] if u != v))
        start = max(i for i, key in enumerate(chain) if key in self._marginals)
        current = self._marginals[chain[start]]
        used = sum(m.nbytes for m in self._marginals.values()) - self.table.nbytes
        for prev, key in zip(chain[start:], chain[start + 1:], strict=False):
            dropped = next(i for i, u in enumerate(prev) if u not in key)
            current = current.sum(axis=dropped, dtype=np.float64 if current.size < 1 << 20 else np.float32)
            if used + current.nbytes <= self.cache_bytes:
                self._marginals[key] = current
                used += current.nbytes
        return current.astype(np.float64)

    def clipped(self, variables: tuple[int, ...]) -> np.ndarray:
        """The marginal clipped at 0 and zero-padded to C categories per axis; cached per variable set."""
        if variables not in self._clipped:
            m = np.clip(self.marginal(variables), 0, None)
            self._clipped[variables] = np.pad(m, [(0, self.C - c) for c in m.shape])
        return self._clipped[variables]

    def tables(self, x, y, S) -> np.ndarray:
        C, r = self.C, S.shape[1]
        out = np.empty((len(x), C**r, C, C))
        for t, row in enumerate(np.column_stack([S, x, y]).tolist()):  # one cached marginal per test
            order = tuple(sorted(row))
            out[t] = self.clipped(order).transpose([order.index(v) for v in row]).reshape(C**r, C, C)
        return out


class FisherZ:
    """Fisher z test on a correlation matrix `corr` with public sample size `n` (pcalg gaussCItest).
    NaN correlations (a noisy variance below zero) give r = 0, i.e. independence."""

    def __init__(self, corr: np.ndarray, n: int):
        self.corr = np.asarray(corr, dtype=float)
        self.n = int(n)
        self.n_vars = self.corr.shape[0]

    def partial_correlation(self, x, y, S) -> np.ndarray:
        C, r = self.corr, S.shape[1]
        if r == 0:
            rho = C[x, y]
        elif r == 1:
            k = S[:, 0]
            with np.errstate(invalid="ignore", divide="ignore"):
                rho = (C[x, y] - C[x, k] * C[y, k]) / np.sqrt((1 - C[y, k] ** 2) * (1 - C[x, k] ** 2))
        else:
            idx = np.column_stack([x, y, S])
            sub = C[idx[:, :, None], idx[:, None, :]]
            rho = np.full(len(x), np.nan)
            finite = np.isfinite(sub).all((1, 2))
            if finite.any():
                P = np.linalg.pinv(sub[finite], hermitian=True)
                with np.errstate(invalid="ignore", divide="ignore"):
                    rho[finite] = -P[:, 0, 1] / np.sqrt(P[:, 0, 0] * P[:, 1, 1])
        rho = np.where(np.isnan(rho), 0.0, rho)
        return np.clip(rho, -_R_CLIP, _R_CLIP)

    def pvalues(self, x, y, S) -> np.ndarray:
        x, y, S = np.asarray(x), np.asarray(y), np.asarray(S, dtype=np.int64).reshape(len(x), -1)
        rho = self.partial_correlation(x, y, S)
        z = np.sqrt(self.n - S.shape[1] - 3) * np.arctanh(rho)
        return 2 * norm.sf(np.abs(z))


def distance_scores(test: TableTest, x, y, S, tau: float, d_max: int = 1000) -> np.ndarray:
    """PrivPC distance scores dist(x, y, S) (privpc.md §3.4, corrected sign), greedy, for a batch of tests.

    +(k* - 1) when currently independent (G^2 below the critical value), -(k* - 1) when dependent, where k* is
    the number of single-record changes (+-1 on one cell) after which the decision flips, searched greedily
    (each step takes the move that pushes G^2 fastest towards the threshold), capped at d_max. Tests skipped by
    the small-sample rule are data-independent: +d_max."""
    x, y, S = np.asarray(x), np.asarray(y), np.asarray(S, dtype=np.int64).reshape(len(x), -1)
    dist = np.full(len(x), float(d_max))
    ok = np.flatnonzero(test.computed(x, y, S))
    if not len(ok):
        return dist
    N = test.tables(x[ok], y[ok], S[ok])
    valid = test.valid_cells(x[ok], y[ok], S[ok])
    crit = chi2.isf(tau, test.df(x[ok], y[ok], S[ok]))
    G = g2_statistic(N)
    sign = np.where(G < crit, 1.0, -1.0)  # +1: independent, the search pushes G^2 up
    res = np.full(len(ok), float(d_max))
    active = np.arange(len(ok))
    T = len(ok)
    for step in range(d_max):
        if not len(active):
            break
        Na, s = N[active], sign[active]
        margins = (Na.sum(3)[..., None], Na.sum(2)[:, :, None, :], Na.sum((2, 3))[..., None, None])
        moves = []
        for delta in (1.0, -1.0):
            dG = 2 * (h(Na + delta) - h(Na) - (h(margins[0] + delta) - h(margins[0]))
                      - (h(margins[1] + delta) - h(margins[1])) + h(margins[2] + delta) - h(margins[2]))
            allowed = valid[active] & (Na > 0 if delta < 0 else True)
            moves.append(np.where(allowed, s[:, None, None, None] * dG, -np.inf))
        gain = np.stack(moves, 1).reshape(len(active), -1)  # (t, 2 * cells): signed progress towards the flip
        best = gain.argmax(1)
        newG = G[active] + s * gain[np.arange(len(active)), best]
        crossed = np.where(s > 0, newG >= crit[active], newG < crit[active])
        res[active[crossed]] = step
        keep = ~crossed
        active, best, newG = active[keep], best[keep], newG[keep]
        which, cell = np.divmod(best, N[0].size)
        N.reshape(T, -1)[active, cell] += np.where(which == 0, 1.0, -1.0)
        G[active] = newG
    dist[ok] = sign * res
    return dist
