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

Tables are kept in their exact shapes (`Tables`: each test's own category counts, all tests in one flat array),
never padded to the largest category count: with Adult's 100-category attributes padding made an order-1 table
10^6 cells where the exact one has a few hundred.

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


def chi2_statistic(N: np.ndarray) -> np.ndarray:
    """Pearson sum (O - E)^2 / E with E = N_ka. N_k.b / N_k, cells with E = 0 left out, for tables N (T, K, A, B)."""
    Nk = N.sum((2, 3), keepdims=True)
    E = N.sum(3, keepdims=True) * N.sum(2, keepdims=True) / np.where(Nk > 0, Nk, 1)
    return np.where(E > 0, (N - E) ** 2 / np.where(E > 0, E, 1), 0.0).sum((1, 2, 3))


def _offsets(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def _ranges(starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The concatenated index ranges [start, stop), with each range's offset in the result and its length."""
    lens = stops - starts
    seg = _offsets(lens)[:-1]
    return np.arange(lens.sum()) - np.repeat(seg - starts, lens), seg, lens


class Tables:
    """Exact-shape 3-way tables N[k, a, b] of T tests (test t: K_t strata of A_t x B_t cells) in one flat array,
    test-major, then k, a, b row-major; k is the mixed-radix code of the conditioning values, first variable least
    significant (the order of pcalg's strata). Index arrays map every cell to its test, stratum, row margin N_ka.
    and column margin N_k.b, and every margin to its stratum."""

    def __init__(self, K, A, B):
        K, A, B = (np.asarray(v, dtype=np.int64) for v in (K, A, B))
        sA, sB = np.repeat(A, K), np.repeat(B, K)  # per stratum
        self.T, self.R = len(K), int(K.sum())
        self.stratum_test = np.repeat(np.arange(self.T), K)
        self.test_strata = _offsets(K)  # first stratum of each test
        self.stratum_cells = _offsets(sA * sB)  # first cell of each stratum
        self.test_cells = self.stratum_cells[self.test_strata]
        self.cell_stratum = np.repeat(np.arange(self.R), sA * sB)
        within = np.arange(self.stratum_cells[-1]) - self.stratum_cells[self.cell_stratum]
        self.cell_row = _offsets(sA)[self.cell_stratum] + within // sB[self.cell_stratum]
        self.cell_col = _offsets(sB)[self.cell_stratum] + within % sB[self.cell_stratum]
        self.cell_test = self.stratum_test[self.cell_stratum]
        self.row_stratum, self.col_stratum = np.repeat(np.arange(self.R), sA), np.repeat(np.arange(self.R), sB)
        self.counts = np.zeros(len(within))

    def margins(self, N: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """N_ka., N_k.b, N_k."""
        return (np.bincount(self.cell_row, N, len(self.row_stratum)),
                np.bincount(self.cell_col, N, len(self.col_stratum)), np.bincount(self.cell_stratum, N, self.R))

    def per_test(self, values: np.ndarray, owner: np.ndarray) -> np.ndarray:
        """Sum per test of `values` (one per cell, margin or stratum: `owner` gives its test)."""
        return np.bincount(owner, values, self.T)

    def g2(self) -> np.ndarray:
        """G^2 = 2 sum_k [sum_ab h(N_kab) - sum_a h(N_ka.) - sum_b h(N_k.b) + h(N_k)] per test (privpc.md §1.2)."""
        Na, Nb, Nk = self.margins(self.counts)
        st = self.stratum_test
        return 2 * (self.per_test(h(self.counts), self.cell_test) - self.per_test(h(Na), st[self.row_stratum])
                    - self.per_test(h(Nb), st[self.col_stratum]) + self.per_test(h(Nk), st))

    def chi2(self) -> np.ndarray:
        """Pearson sum (O - E)^2 / E with E = N_ka. N_k.b / N_k, cells with E = 0 left out, per test."""
        Na, Nb, Nk = self.margins(self.counts)
        E = Na[self.cell_row] * Nb[self.cell_col] / np.maximum(Nk[self.cell_stratum], 1)
        return self.per_test(np.where(E > 0, (self.counts - E) ** 2 / np.where(E > 0, E, 1), 0.0), self.cell_test)

    def adaptive_df(self) -> np.ndarray:
        """Degrees of freedom from the observed table (causal-learn's rule, without its +1 per empty stratum):
        sum over non-empty strata of (non-empty rows - 1)(non-empty columns - 1)."""
        Na, Nb, _ = self.margins(self.counts)
        rows = np.bincount(self.row_stratum, Na > 0, self.R)
        cols = np.bincount(self.col_stratum, Nb > 0, self.R)
        return self.per_test(np.maximum(rows - 1, 0) * np.maximum(cols - 1, 0), self.stratum_test)


class TableTest:
    """Shared part of the categorical tests: degrees of freedom, the small-sample rule, p-values."""

    def __init__(self, cats, n: int, statistic: str = "g2", n_min_factor: float = 10, df: str = "fixed"):
        if statistic not in ("g2", "chi2"):
            raise ValueError(f"statistic={statistic!r}: allowed g2, chi2")
        if df not in ("fixed", "adaptive"):
            raise ValueError(f"df={df!r}: allowed fixed (pcalg), adaptive (causal-learn)")
        self.cats = np.asarray(cats, dtype=np.int64)
        self.n = int(n)
        self.n_vars = len(self.cats)
        self.statistic = statistic
        self.n_min_factor = float(n_min_factor)
        self.df_mode = df

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
        """(statistic, df) per test."""
        raise NotImplementedError


class GSquare(TableTest):
    """G^2 / chi^2 test on integer-coded data `codes` (n, p) with public category counts `cats`."""

    def __init__(self, codes, cats, statistic: str = "g2", n_min_factor: float = 10, df: str = "fixed",
                 max_batch_cells: int = 4_000_000, dense_cells: int | None = None):
        codes = np.asarray(codes, dtype=np.int64)
        super().__init__(cats, len(codes), statistic, n_min_factor, df)
        self.codes = codes
        self.max_batch_cells = max_batch_cells
        # A dense table costs its cells, the observed-cells path a sort of the n records: dense up to n cells.
        self.dense_cells = self.n if dense_cells is None else dense_cells
        self._columns: np.ndarray | None = None  # the codes variable-major (p, n), built on first use

    def statistics(self, x, y, S) -> tuple[np.ndarray, np.ndarray]:
        """Dense exact-shape tables while a test has at most `dense_cells` cells; above (high orders, where most
        strata are empty) the statistic is computed from the observed cells only."""
        stat, df = np.empty(len(x)), np.empty(len(x))
        dense = self.cats[x] * self.cats[y] * np.prod(self.cats[S], axis=1) <= self.dense_cells
        if dense.any():
            tab = self.exact_tables(x[dense], y[dense], S[dense])
            stat[dense] = tab.g2() if self.statistic == "g2" else tab.chi2()
            df[dense] = tab.adaptive_df()
        step = max(1, self.max_batch_cells // max(self.n, 1))
        sparse = np.flatnonzero(~dense)
        for lo in range(0, len(sparse), step):
            sl = sparse[lo:lo + step]
            stat[sl], df[sl] = self._sparse(x[sl], y[sl], S[sl])
        if self.df_mode == "fixed":
            df = self.df(x, y, S)
        return stat, df

    def _sparse(self, x, y, S):
        C, r, t = int(self.cats.max()), S.shape[1], len(x)
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
        if self.statistic == "g2":
            stat = 2 * (np.bincount(test, h(N), t) - np.bincount(ka // per, h(Nka), t)
                        - np.bincount(kb // per, h(Nkb), t) + np.bincount(kk // C**r, h(Nk), t))
        else:  # Pearson: sum over observed cells of O^2 N_k / (N_ka N_kb), minus n
            e = Nka[np.searchsorted(ka, cell // C)] * Nkb[np.searchsorted(kb, (cell // (C * C)) * C + cell % C)]
            stat = np.bincount(test, N**2 * Nk[np.searchsorted(kk, cell // (C * C))] / e, t) - self.n
        rows = np.bincount(kk // C**r, np.maximum(np.bincount(np.searchsorted(kk, ka // C), minlength=len(kk)) - 1, 0)
                           * np.maximum(np.bincount(np.searchsorted(kk, kb // C), minlength=len(kk)) - 1, 0), t)
        return stat, rows

    def exact_tables(self, x, y, S) -> Tables:
        """The tests' 3-way tables N[k, a, b] in their exact shapes (`_count`)."""
        cS = self.cats[S]
        tab = Tables(np.prod(cS, axis=1), self.cats[x], self.cats[y])
        strides = np.cumprod(np.column_stack([np.ones(len(x), np.int64), cS[:, :-1]]), axis=1)[:, :S.shape[1]]
        self._count(tab, np.column_stack([S, x, y]),
                    np.column_stack([strides * (self.cats[x] * self.cats[y])[:, None], self.cats[y],
                                     np.ones(len(x), np.int64)]))
        return tab

    CHUNK_RECORDS = 1 << 18  # records x tests per counting chunk: its keys and scratch stay in the cache (~1 MB each)
    INT32_CELLS = 2**31  # keys in int32 while all the tables of a call have fewer cells, else int64

    def columns(self) -> np.ndarray:
        """The codes variable-major, (p, n) int32: one variable's codes are one contiguous row."""
        if self._columns is None:
            self._columns = np.ascontiguousarray(self.codes.T, dtype=np.int32)
        return self._columns

    def _count(self, tab: Tables, idx: np.ndarray, weight: np.ndarray) -> None:
        """tab.counts of every test: test t's cell of record i is sum_j codes[i, idx[t, j]] * weight[t, j] (the
        mixed-radix code of (k, a, b)); the cells of a chunk of tests are numbered consecutively and counted by one
        bincount. The keys are built in place, one variable at a time over whole contiguous rows of `columns()`."""
        V, n, T = self.columns(), self.n, len(idx)
        if tab.test_cells[-1] >= self.INT32_CELLS:
            V = V.astype(np.int64)
        step = max(1, self.CHUNK_RECORDS // max(n, 1))
        key, tmp = np.empty((2, min(step, T), n), V.dtype)
        weight = weight.astype(V.dtype)
        for lo in range(0, T, step):
            hi = min(lo + step, T)
            first, last = tab.test_cells[lo], tab.test_cells[hi]
            k, s = key[:hi - lo], tmp[:hi - lo]
            np.take(V, idx[lo:hi, -1], axis=0, out=s, mode="wrap")  # y, weight 1; "wrap": unbuffered, as indexing
            np.add(s, (tab.test_cells[lo:hi] - first).astype(V.dtype)[:, None], out=k)
            for j in range(idx.shape[1] - 1):
                np.take(V, idx[lo:hi, j], axis=0, out=s, mode="wrap")
                np.multiply(s, weight[lo:hi, j, None], out=s)
                k += s
            tab.counts[first:last] = np.bincount(k.ravel(), minlength=last - first)


class NoisyTableGSquare(TableTest):
    """`lapmech`'s test: the 3-way tables are marginals of one noisy full table (float32, shape `cats`),
    clipped at 0 after marginalising (privpc.md §4 step 3, P16); the small-sample rule uses the public n.

    G^2 of (x, y | S) is 2 [H(V) - H(V \\ y) - H(V \\ x) + H(S)] with V = {x, y} u S and H(U) the sum of
    h(N) over the clipped V-marginal summed down to U; each term is computed once and shared by every test on
    the same variables."""

    def __init__(self, noisy_table: np.ndarray, n: int, statistic: str = "g2", n_min_factor: float = 10,
                 cache_bytes: float = 1.5e9):
        super().__init__(noisy_table.shape, n, statistic, n_min_factor)
        self.table = noisy_table
        self.cache_bytes = cache_bytes
        self._marginals: dict[tuple[int, ...], np.ndarray] = {tuple(range(self.n_vars)): noisy_table}
        self._marginal_bytes = 0
        self._clipped: dict[tuple[int, ...], np.ndarray] = {}
        self._clipped_bytes = 0
        self._terms: dict[tuple, float] = {}

    def marginal(self, variables: tuple[int, ...]) -> np.ndarray:
        """Noisy marginal over `variables` (sorted tuple), axes in that order. Variables are summed out one at a
        time, highest index first, and every intermediate is cached (within `cache_bytes`), so requests share
        the expensive first passes over the full table."""
        chain = [tuple(range(self.n_vars))]
        for v in sorted(set(chain[0]) - set(variables), reverse=True):
            chain.append(tuple(u for u in chain[-1] if u != v))
        start = max(i for i, key in enumerate(chain) if key in self._marginals)
        current = self._marginals[chain[start]]
        for prev, key in zip(chain[start:], chain[start + 1:], strict=False):
            dropped = next(i for i, u in enumerate(prev) if u not in key)
            current = current.sum(axis=dropped, dtype=np.float64 if current.size < 1 << 20 else np.float32)
            if self._marginal_bytes + current.nbytes <= self.cache_bytes:
                self._marginals[key] = current
                self._marginal_bytes += current.nbytes
        return current.astype(np.float64)

    def clipped(self, variables: tuple[int, ...]) -> np.ndarray:
        """The marginal clipped at 0; the most recent ones are cached (within `cache_bytes`)."""
        if variables not in self._clipped:
            m = np.clip(self.marginal(variables), 0, None)
            while self._clipped and self._clipped_bytes + m.nbytes > self.cache_bytes:
                self._clipped_bytes -= self._clipped.pop(next(iter(self._clipped))).nbytes
            self._clipped[variables] = m
            self._clipped_bytes += m.nbytes
        return self._clipped[variables]

    def term(self, V: tuple[int, ...], axes: tuple[int, ...]) -> float:
        """sum of h over the clipped V-marginal summed over `axes` (positions in V)."""
        key = (V, axes)
        if key not in self._terms:
            self._terms[key] = float(h(self.clipped(V).sum(axis=axes) if axes else self.clipped(V)).sum())
        return self._terms[key]

    def statistics(self, x, y, S) -> tuple[np.ndarray, np.ndarray]:
        stat = np.empty(len(x))
        for t, (xi, yi, *s) in enumerate(np.column_stack([x, y, S]).tolist()):
            V = tuple(sorted((xi, yi, *s)))
            ax, ay = V.index(xi), V.index(yi)
            if self.statistic == "g2":
                stat[t] = 2 * (self.term(V, ()) - self.term(V, (ay,)) - self.term(V, (ax,))
                               + self.term(V, tuple(sorted((ax, ay)))))
            else:
                M = self.clipped(V)
                N = M.transpose([V.index(v) for v in s] + [ax, ay]).reshape(1, -1, M.shape[ax], M.shape[ay])
                stat[t] = chi2_statistic(N)[0]
        return stat, self.df(x, y, S)


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


# ---------------------------------------------------------------------------------------------- distance
def distance_scores(test: GSquare, x, y, S, tau: float, d_max: int = 1000) -> np.ndarray:
    """PrivPC distance scores dist(x, y, S) (privpc.md §3.4, corrected sign), greedy, for a batch of tests.

    +(k* - 1) when currently independent (G^2 below the critical value), -(k* - 1) when dependent, where k* is
    the number of single-record changes (+-1 on one cell) after which the decision flips, searched greedily
    (each step takes the move that pushes G^2 fastest towards the threshold; ties: the first in the order
    +1 moves before -1 moves, then cells in table order), capped at d_max. Tests skipped by the small-sample rule
    are data-independent: +d_max."""
    x, y, S = np.asarray(x), np.asarray(y), np.asarray(S, dtype=np.int64).reshape(len(x), -1)
    dist = np.full(len(x), float(d_max))
    ok = np.flatnonzero(test.computed(x, y, S))
    if len(ok):
        tables = test.exact_tables(x[ok], y[ok], S[ok])
        dist[ok] = GreedyFlip(tables, chi2.isf(tau, test.df(x[ok], y[ok], S[ok])), d_max).run()
    return dist


class GreedyFlip:
    """The greedy search behind `distance_scores`. A move (+-1 on one cell of stratum k) changes G^2 by a term
    of stratum k only, so after each move only the moved stratum's gains are recomputed; every stratum keeps its
    best move per direction, and a test's best move is the best over its strata. Counts stay integers, so
    h(x) = x ln x is read from a table of its values."""

    MOVES = np.array([[1], [-1]])

    def __init__(self, tab: Tables, crit: np.ndarray, d_max: int):
        self.tab, self.crit, self.d_max = tab, crit, d_max
        self.N = tab.counts.astype(np.int64)
        self.Na, self.Nb, self.Nk = (m.astype(np.int64) for m in tab.margins(tab.counts))
        self.h = h(np.arange(-1.0, self.Nk.max(initial=0) + d_max + 2))  # self.h[x + 1] = h(x), h(-1) = NaN
        self.G = tab.g2()
        self.sign = np.where(self.G < crit, 1.0, -1.0)  # +1: independent, the search pushes G^2 up
        self.best_gain = np.empty((2, tab.R))
        self.best_cell = np.empty((2, tab.R), dtype=np.int64)
        self.refresh(np.arange(tab.R))

    def refresh(self, strata: np.ndarray) -> None:
        """Recompute the best move per direction of `strata` (signed progress towards the flip)."""
        tab, H = self.tab, self.h
        idx, seg, lens = _ranges(tab.stratum_cells[strata], tab.stratum_cells[strata + 1])
        n, a, b, k = self.N[idx] + 1, self.Na[tab.cell_row[idx]] + 1, self.Nb[tab.cell_col[idx]] + 1, \
            self.Nk[tab.cell_stratum[idx]] + 1
        d = self.MOVES  # rows: +1, -1
        dG = 2 * (H[n + d] - H[n] - (H[a + d] - H[a]) - (H[b + d] - H[b]) + H[k + d] - H[k])
        gain = self.sign[tab.cell_test[idx]] * dG
        gain[1, n == 1] = -np.inf  # no record to remove from an empty cell
        top = np.maximum.reduceat(gain, seg, axis=1)
        pos = np.where(gain == np.repeat(top, lens, axis=1), np.arange(len(idx)), len(idx))
        self.best_gain[:, strata], self.best_cell[:, strata] = top, idx[np.minimum.reduceat(pos, seg, axis=1)]

    def choose(self, tests: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(direction, cell, gain) of each test's best move: the first maximum over its +1 moves, then -1 moves."""
        tab = self.tab
        top = np.maximum.reduceat(self.best_gain, tab.test_strata[:-1], axis=1)  # (2, T)
        m = np.where(top[0] >= top[1], 0, 1)
        gain = top[m, np.arange(tab.T)]
        st = tab.stratum_test
        hit = self.best_gain[m[st], np.arange(tab.R)] == gain[st]
        stratum = np.minimum.reduceat(np.where(hit, np.arange(tab.R), tab.R), tab.test_strata[:-1])
        cell = self.best_cell[m, stratum]
        return m[tests], cell[tests], gain[tests]

    def run(self) -> np.ndarray:
        """Signed steps before the decision flips, capped at d_max."""
        tab = self.tab
        res = np.full(tab.T, float(self.d_max))
        active = np.arange(tab.T)
        for step in range(self.d_max):
            if not len(active):
                break
            m, cell, gain = self.choose(active)
            newG = self.G[active] + self.sign[active] * gain
            crossed = np.where(self.sign[active] > 0, newG >= self.crit[active], newG < self.crit[active])
            res[active[crossed]] = step
            keep = ~crossed
            active, m, cell = active[keep], m[keep], cell[keep]
            delta = np.where(m == 0, 1, -1)
            self.N[cell] += delta
            self.Na[tab.cell_row[cell]] += delta
            self.Nb[tab.cell_col[cell]] += delta
            self.Nk[tab.cell_stratum[cell]] += delta
            self.G[active] = newG[keep]
            self.refresh(tab.cell_stratum[cell])
        return self.sign * res
