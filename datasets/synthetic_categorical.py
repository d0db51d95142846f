"""`synthetic_categorical`: a random DAG over categorical variables and an ancestral sample (privpc.md §1.4,
our stand-in for the TETRAD generator the thesis used, whose parameters it does not give).

1. A random topological order; `graph.edges: exact` picks exactly round(s p(p-1)/2) of the forward pairs
   uniformly (`bernoulli`: each with probability s); optional caps `graph.max_indegree` / `graph.max_degree`
   (edges violating a cap are skipped, in a random order of the pairs).
2. Categories per node ~ U{cats.low..cats.high} (default 2..5); redrawn while the full table would exceed
   `cats.max_cells` (so that `lapmech` can hold it; the number of redraws goes into meta), at most 1000 times
   (for p >= 20 the cap is unreachable and the last draw is kept).
3. Conditional probability tables, one row per parent configuration, `cpt.scheme`: `uniform_normalised`
   (U(0,1) per category, divided by the row sum; TETRAD's MlBayesIm RANDOM), `dirichlet` (Dirichlet(alpha)),
   `strong` (one random category 1.0, the others U(0, 0.3), normalised).
4. n records drawn ancestrally, codes 0..Cat_j - 1.
The DAG goes into `meta["true_adjacency"]`. All draws use the run's data stream.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from privfair_cli.errors import ConfigError, DataError

from . import Table

VIEWS = ("discrete", "graph_reference")  # integer codes per node; the generating DAG is the reference
MAX_REDRAWS = 1000  # beyond this (large p) the cap is given up: the table is too big for lapmech anyway


def random_dag(p: int, s: float, rng: np.random.Generator, edges: str = "exact", max_indegree=None,
               max_degree=None) -> np.ndarray:
    """0/1 adjacency A[i, j] = 1 for i -> j, acyclic under a random node order."""
    order = rng.permutation(p)
    fi, fj = np.triu_indices(p, 1)  # forward pairs in the order's positions
    if edges == "exact":
        chosen = rng.permutation(len(fi))
        target = int(round(s * len(fi)))
    elif edges == "bernoulli":
        chosen = rng.permutation(np.flatnonzero(rng.random(len(fi)) < s))
        target = len(chosen)
    else:
        raise ConfigError(f"data.graph.edges={edges!r} is unknown; allowed: exact, bernoulli")
    A = np.zeros((p, p), dtype=np.int8)
    if max_indegree is None and max_degree is None:
        keep = chosen[:target]
        A[order[fi[keep]], order[fj[keep]]] = 1
        return A
    for e in chosen:  # caps: a pass over the shuffled pairs, skipping any edge that would break one
        if A.sum() >= target:
            break
        u, v = order[fi[e]], order[fj[e]]
        if max_indegree is not None and A[:, v].sum() >= max_indegree:
            continue
        if max_degree is not None and max(A[u].sum() + A[:, u].sum(), A[v].sum() + A[:, v].sum()) >= max_degree:
            continue
        A[u, v] = 1
    return A


def cpt_rows(k: int, rows: int, scheme: str, rng: np.random.Generator, alpha: float = 1.0) -> np.ndarray:
    if scheme == "uniform_normalised":
        w = rng.random((rows, k))
    elif scheme == "dirichlet":
        w = rng.dirichlet(np.full(k, alpha), size=rows)
    elif scheme == "strong":
        w = rng.uniform(0, 0.3, (rows, k))
        w[np.arange(rows), rng.integers(0, k, rows)] = 1.0
    else:
        raise ConfigError(f"data.cpt.scheme={scheme!r} is unknown; allowed: uniform_normalised, dirichlet, strong")
    return w / w.sum(1, keepdims=True)


def topological_order(A: np.ndarray) -> list[int]:
    indeg, order, ready = A.sum(0).astype(int), [], list(np.flatnonzero(A.sum(0) == 0))
    while ready:
        v = ready.pop(0)
        order.append(int(v))
        for w in np.flatnonzero(A[v]):
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    return order


def ancestral_sample(A: np.ndarray, cats: np.ndarray, cpts: list[np.ndarray], n: int,
                     rng: np.random.Generator) -> np.ndarray:
    """n records, one node at a time in topological order, vectorised over records."""
    codes = np.zeros((n, len(A)), dtype=np.int64)
    for j in topological_order(A):
        parents = np.flatnonzero(A[:, j])
        config = np.ravel_multi_index(codes[:, parents].T, cats[parents]) if len(parents) else np.zeros(n, int)
        cum = np.cumsum(cpts[j][config], axis=1)
        codes[:, j] = np.minimum((rng.random(n)[:, None] >= cum).sum(1), cats[j] - 1)
    return codes


def generate(card, rng: np.random.Generator) -> Table:
    p, s, n = int(card["p"]), float(card["s"]), int(card["n"])
    if p < 2 or not 0 <= s <= 1 or n < 1:
        raise DataError(f"data={card['name']}: need p >= 2, 0 <= s <= 1 and n >= 1 (got p={p}, s={s}, n={n})")
    g, c, cpt = card.get("graph") or {}, card.get("cats") or {}, card.get("cpt") or {}
    A = random_dag(p, s, rng, g.get("edges", "exact"), g.get("max_indegree"), g.get("max_degree"))
    low, high, max_cells = int(c.get("low", 2)), int(c.get("high", 5)), float(c.get("max_cells", 2**29))
    redraws = 0
    cats = rng.integers(low, high + 1, p)
    while np.prod(cats, dtype=np.float64) > max_cells and redraws < MAX_REDRAWS:
        redraws += 1
        cats = rng.integers(low, high + 1, p)
    scheme, alpha = cpt.get("scheme", "uniform_normalised"), float(cpt.get("alpha", 1.0))
    cpts = [cpt_rows(int(cats[j]), int(np.prod(cats[A[:, j] == 1])), scheme, rng, alpha) for j in range(p)]
    codes = ancestral_sample(A, cats, cpts, n, rng)
    names = [f"V{i + 1}" for i in range(p)]
    frame = pd.DataFrame(codes, columns=names)
    meta = {"true_adjacency": A, "category_redraws": redraws}
    return Table(card["name"], codes.astype(float), np.zeros(n, dtype=np.int64), None, names, frame,
                 {nm: int(k) for nm, k in zip(names, cats, strict=True)}, {}, meta)
