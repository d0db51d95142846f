"""Tree-structured marginal model: estimate consistent, non-negative marginals from noisy measurements and
sample from it (prefair.md §3 steps 7-8, the "simpler fallback estimator for trees").

Pure post-processing of noisy measurements: nothing here touches private data.

- `Measurement`: noisy counts `y` of one clique (an attribute or an edge) with per-cell noise variance `var`.
- `estimate_total`: Nhat, the inverse-variance weighted mean of the measurements' totals.
- `project_simplex`: argmin sum_c w_c (z_c - a_c)^2 subject to z >= 0, sum z = total (weighted Euclidean
  projection; bisection on the multiplier, vectorised).
- `fit_tree`: node marginals = inverse-variance combination of the 1-way measurement and the row/column sums
  of every measured edge table touching the node, projected on the simplex; edge tables = clipped noisy
  tables scaled by iterative proportional fitting to those node marginals. The result is a consistent set of
  marginals, so P(x) = prod_edges P_ij / prod_nodes P_i^(deg(i)-1) is a proper distribution.
- `TreeModel.sample`: the "rounding" sampler of Private-PGM (root by `alloc`, then each child per parent
  value by `alloc`), vectorised over parent values with Gumbel top-k draws for the without-replacement step.
- `neighbours`, `traverse`: adjacency lists and one walk, breadth-first (the sampler's `tree_order`) or
  depth-first (PreFair's forest components), in the neighbours' insertion order.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

FLOOR = 1e-3  # floor of a clipped noisy edge cell before IPF (keeps every cell reachable)


@dataclass(frozen=True)
class Measurement:
    clique: tuple[int, ...]
    y: np.ndarray
    var: np.ndarray  # per-cell noise variance (same shape as y)
    total_var: float  # variance of y.sum()


def estimate_total(measurements: list[Measurement]) -> float:
    """Nhat = max(1, sum(t_k / v_k) / sum(1 / v_k)), t_k the total of measurement k, v_k its variance."""
    t = np.array([m.y.sum() for m in measurements])
    v = np.array([m.total_var for m in measurements])
    return float(max(1.0, np.sum(t / v) / np.sum(1 / v)))


def project_simplex(a, total: float, w=None, iters: int = 100) -> np.ndarray:
    """Weighted projection of `a` onto {z >= 0, sum z = total}: z_c = max(0, a_c - lam / w_c)."""
    a = np.asarray(a, dtype=float)
    w = np.ones_like(a) if w is None else np.asarray(w, dtype=float)
    lo = np.min(w * (a - total)) - 1.0  # sum z(lo) >= total
    hi = np.max(w * a)  # sum z(hi) = 0
    for _ in range(iters):
        lam = (lo + hi) / 2
        if np.maximum(a - lam / w, 0).sum() > total:
            lo = lam
        else:
            hi = lam
    z = np.maximum(a - (lo + hi) / 2 / w, 0)
    s = z.sum()
    return z * (total / s) if s > 0 else np.full_like(a, total / a.size)


def _ratio(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    return np.divide(target, current, out=np.zeros_like(target), where=current > 0)


def ipf(table: np.ndarray, row: np.ndarray, col: np.ndarray, iters: int = 200, tol: float = 1e-10) -> np.ndarray:
    """Scale a positive table until its row and column sums equal `row` and `col` (same total)."""
    t = table.copy()
    bound = tol * max(row.sum(), 1.0)
    rows = t.sum(axis=1)  # the row sums of the current table, also the next round's (the same sums, not redone)
    for _ in range(iters):
        t *= _ratio(row, rows)[:, None]
        t *= _ratio(col, t.sum(axis=0))[None, :]
        rows = t.sum(axis=1)
        if np.abs(rows - row).max() <= bound:
            break
    return t


def neighbours(d: int, edges) -> list[list[int]]:
    """Adjacency lists of an undirected graph on d nodes, each in the order of `edges`."""
    nbrs: list[list[int]] = [[] for _ in range(d)]
    for i, j in edges:
        nbrs[i].append(j)
        nbrs[j].append(i)
    return nbrs


def traverse(nbrs: list[list[int]], root: int, seen: np.ndarray, parent: np.ndarray | None = None,
             depth_first: bool = False) -> list[int]:
    """The nodes not yet `seen` that `root` reaches, in breadth-first order (or depth-first: the last pushed is
    visited first), each node's unseen neighbours taken in adjacency order; marks them in `seen` and, with
    `parent`, records the node each was reached from."""
    seen[root] = True
    order, todo = [], deque([root])
    while todo:
        u = todo.pop() if depth_first else todo.popleft()
        order.append(u)
        for v in nbrs[u]:
            if not seen[v]:
                seen[v] = True
                if parent is not None:
                    parent[v] = u
                todo.append(v)
    return order


def tree_order(d: int, edges: list[tuple[int, int]], root: int = 0) -> tuple[list[int], np.ndarray]:
    """BFS order of a spanning tree and the parent of every node (-1 for the root)."""
    parent = np.full(d, -1)
    order = traverse(neighbours(d, edges), root, np.zeros(d, bool), parent)
    if len(order) != d:
        raise ValueError("the selected edges do not span all attributes")
    return order, parent


def alloc(expected: np.ndarray, sizes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Integer counts per row of `expected` (G x k) summing to `sizes` (G): floors of the rescaled values plus
    the remaining units on distinct cells drawn without replacement with probability proportional to the
    fractional parts (Gumbel top-k = successive sampling)."""
    e = np.asarray(expected, dtype=float)
    sizes = np.asarray(sizes, dtype=np.int64)
    rs = e.sum(axis=1, keepdims=True)
    e = np.where(rs > 0, e / np.where(rs > 0, rs, 1), 1.0 / e.shape[1]) * sizes[:, None]
    base = np.floor(e)
    frac = e - base
    left = sizes - base.sum(axis=1).astype(np.int64)
    with np.errstate(divide="ignore"):
        keys = np.log(frac) + rng.gumbel(size=frac.shape)
    rank = np.argsort(np.argsort(-keys, axis=1), axis=1)
    return (base + (rank < left[:, None])).astype(np.int64)


def code_dtype(size: int) -> type:
    """The smallest signed integer type that holds the codes 0..size-1 (int16 at least: numpy's stable sort of
    a 16-bit key is a radix sort)."""
    for dtype in (np.int16, np.int32):
        if size - 1 <= np.iinfo(dtype).max:
            return dtype
    return np.int64


@dataclass
class TreeModel:
    """Consistent marginals of a spanning tree: `nodes[i]` (probabilities), `tables[(a, b)]` (a = parent)."""

    domain: list[int]
    edges: list[tuple[int, int]]
    nodes: list[np.ndarray]
    tables: dict[tuple[int, int], np.ndarray]
    total: float

    def sample(self, rows: int, rng: np.random.Generator) -> np.ndarray:
        """`rows` rows x attributes of int64 codes (`sample_columns`, transposed)."""
        return self.sample_columns(rows, rng).T.astype(np.int64)

    def sample_columns(self, rows: int, rng: np.random.Generator) -> np.ndarray:
        """The rounding sampler, attributes x rows in the smallest integer type of the domain (int16 for KDD), so
        a parent's codes are gathered from and a child's scattered into an array a quarter of int64's size. A
        parent's value counts are the column sums of its own allocation (the bincount of its sampled codes)."""
        d = len(self.domain)
        order, parent = tree_order(d, self.edges)
        dtype = code_dtype(max(self.domain))
        out = np.empty((d, rows), dtype=dtype)  # every row of every attribute is written below (a spanning tree)
        value_counts: list[np.ndarray | None] = [None] * d
        root = order[0]
        counts = alloc(self.nodes[root][None, :], np.array([rows]), rng)[0]
        out[root] = rng.permutation(np.repeat(np.arange(self.domain[root]), counts))
        value_counts[root] = counts
        for j in order[1:]:
            a = parent[j]
            pa = out[a]
            counts = alloc(self.tables[(a, j)], value_counts[a], rng)
            value_counts[j] = counts.sum(axis=0)
            codes = np.repeat(np.tile(np.arange(self.domain[j], dtype=dtype), self.domain[a]), counts.ravel())
            perm = rng.permutation(rows)
            rows_sorted = perm[np.argsort(pa[perm], kind="stable")]  # stable: the same order whatever the sort
            out[j, rows_sorted] = codes
        return out

    def marginal(self, i: int, j: int) -> np.ndarray:
        """Model marginal of an edge (i, j) as probabilities, axes in the order (i, j)."""
        if (i, j) in self.tables:
            return self.tables[(i, j)]
        return self.tables[(j, i)].T


def fit_tree(domain: list[int], edges: list[tuple[int, int]], measurements: list[Measurement]) -> TreeModel:
    """Consistent non-negative marginals for the tree from 1-way and 2-way noisy measurements."""
    d = len(domain)
    total = estimate_total(measurements)
    num = [np.zeros(k) for k in domain]
    den = [np.zeros(k) for k in domain]
    two_way = {}
    for m in measurements:
        if len(m.clique) == 1:
            (i,) = m.clique
            num[i] += m.y / m.var
            den[i] += 1 / m.var
        else:
            i, j = m.clique
            two_way[(i, j)] = m
            for axis, node in ((1, i), (0, j)):
                v = m.var.sum(axis=axis)  # variance of a row (column) sum
                num[node] += m.y.sum(axis=axis) / v
                den[node] += 1 / v
    nodes = []
    for i in range(d):
        if not np.all(den[i] > 0):
            raise ValueError(f"attribute {i} has no measurement")
        nodes.append(project_simplex(num[i] / den[i], total, w=den[i]) / total)
    order, parent = tree_order(d, edges)
    tables = {}
    for j in order[1:]:
        a = parent[j]
        m = two_way.get((a, j))
        y = m.y if m is not None else two_way[(j, a)].y.T
        t = ipf(np.maximum(y, 0) + FLOOR, nodes[a], nodes[j])
        tables[(a, j)] = t / t.sum()
    return TreeModel(list(domain), [(int(parent[j]), int(j)) for j in order[1:]], nodes, tables, total)


PGM_ITERS = 5000  # mirror-descent iterations: the MST reference code's FactoredInference(iters=5000)


def fit_pgm(domain: list[int], edges: list[tuple[int, int]], measurements: list[Measurement],
            iters: int = PGM_ITERS) -> TreeModel:
    """The same measurements fitted by Private-PGM (mbi 2.x, `MirrorDescent`, float64), the PreFair paper's
    estimator; its marginals on the tree's nodes and edges become a `TreeModel`, so sampling is the same rounding
    sampler. A cell's variance enters as Private-PGM's per-measurement std through the Q' rewrite: each cell and its
    query are scaled by sqrt(v_min / v_cell), so every scaled cell has the std sqrt(v_min). Raises ImportError when
    mbi is not installed (the optional `pgm` extra)."""
    import warnings

    with warnings.catch_warnings():  # mbi warns about JAX's float32 default and its compilation cache on import
        warnings.simplefilter("ignore")
        import jax
        import mbi
        from mbi import estimation
        from mbi.marginal_loss import WeightedQuery
    jax.config.update("jax_enable_x64", True)
    names = [f"a{i}" for i in range(len(domain))]
    v_min = min(float(np.min(m.var)) for m in measurements)
    loss = []
    for m in measurements:
        w = np.sqrt(v_min / np.asarray(m.var, float)).ravel()
        query = WeightedQuery(w) if not np.allclose(w, 1.0) else mbi.marginal_loss.DatavectorQuery()
        loss.append(mbi.LinearMeasurement(np.asarray(m.y, float).ravel() * w, tuple(names[i] for i in m.clique),
                                          stddev=math.sqrt(v_min), query=query))
    d = len(domain)
    order, parent = tree_order(d, edges)
    try:
        model = estimation.MirrorDescent().estimate(mbi.Domain(names, list(domain)), loss, iters=iters)
        total = float(model.total)
        nodes = []
        for i in range(d):
            p = np.clip(np.asarray(model.project((names[i],)).datavector(), float), 0, None)
            nodes.append(p / p.sum())
        tables = {}
        for j in order[1:]:
            a = int(parent[j])
            t = np.clip(np.asarray(model.project((names[a], names[j])).datavector(flatten=False), float), 0, None)
            tables[(a, int(j))] = t / t.sum()
    finally:
        # Every fit compiles new XLA executables (each release has its own domain and cliques) and JAX keeps them
        # all: about 230 memory maps a fit, so a sweep of a few hundred runs in one process hit the kernel's map
        # limit and died in LLVM ("Cannot allocate memory"). Nothing is reused across fits, so drop them.
        jax.clear_caches()
    return TreeModel(list(domain), [(int(parent[j]), int(j)) for j in order[1:]], nodes, tables, total)
