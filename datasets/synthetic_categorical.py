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

`generator: tetrad` replaces steps 1 and 3 by TETRAD's own simulation of a categorical Bayes net (the thesis'
generator, privpc.md P13), from TETRAD 6's source:
- graph: `RandomGraph.randomGraphRandomForwardEdges` with round(s p(p-1)/2) edges requested: the nodes shuffled,
  then repeated draws of two node positions c1, c2 (with replacement); a draw is skipped when c1 = c2, the pair is
  already adjacent, or the edge would exceed a cap (`graph.max_indegree` of the later node, `max_outdegree` of the
  earlier, `max_degree` of either; none by default, TETRAD's defaults of 100 never bind for p <= 20); otherwise the
  edge goes from the earlier to the later position. TETRAD stops after 2 x (requested edges) draws, so a dense
  request can end with fewer edges (recorded in meta as `edges_requested` / `edges_drawn`);
- CPT rows: `MlBayesIm` with `RANDOM` initialisation, `randomizeRow` -> `getRandomWeights3`: per category
  v ~ U(0, 1), weight 3v if v > 0.5 else v, the row normalised;
- categories per node as `BayesPm(graph, min, max)` draws them: `setNewValues` adds categories in a loop
  `for (i = 0; i < pickNumVals(min, max); i++)` whose bound is redrawn, uniform on min..max, at every test, so a
  node has k categories with probability prod_{i=min..k-1} (max - i) / (max - min + 1) times (k - min + 1) /
  (max - min + 1): for 2..5, 1/4, 3/8, 9/32, 3/32 (not uniform; `tetrad_categories`);
- ancestral sampling (`MlBayesIm.simulateData`) as above. `graph.edges` and `cpt.scheme` do not apply.
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


def tetrad_forward_dag(p: int, n_edges: int, rng: np.random.Generator, max_indegree=None, max_outdegree=None,
                       max_degree=None) -> np.ndarray:
    """TETRAD's randomGraphRandomForwardEdges (module docstring): 0/1 adjacency A[i, j] = 1 for i -> j. A loop over
    draws, not rows: at most 2 n_edges + 1 iterations for p nodes."""
    big = p + 1  # "no cap"
    cap_in, cap_out, cap_deg = (big if c is None else int(c) for c in (max_indegree, max_outdegree, max_degree))
    order = rng.permutation(p)
    A = np.zeros((p, p), dtype=np.int8)
    edges = trials = 0
    while edges < n_edges:
        c1, c2 = (int(c) for c in rng.integers(0, p, 2))
        trials += 1
        if trials > 2 * n_edges:
            break
        if c1 == c2:
            continue
        u, v = order[min(c1, c2)], order[max(c1, c2)]
        if A[u, v] or A[v, u] or A[:, v].sum() >= cap_in or A[u].sum() >= cap_out:
            continue
        if A[u].sum() + A[:, u].sum() + 1 > cap_deg or A[v].sum() + A[:, v].sum() + 1 > cap_deg:
            continue
        A[u, v] = 1
        edges += 1
    return A


def tetrad_categories(low: int, high: int, p: int, rng: np.random.Generator) -> np.ndarray:
    """TETRAD's category counts (`BayesPm.setNewValues`): the loop `for (i = 0; i < pickNumVals(low, high); i++)`
    redraws its bound U{low..high} at every test, so node j gets the first i at which the draw is <= i."""
    draws = rng.integers(low, high + 1, (p, high + 1))
    return np.argmax(draws <= np.arange(high + 1), axis=1)


def tetrad_cpt_rows(k: int, rows: int, rng: np.random.Generator) -> np.ndarray:
    """MlBayesIm RANDOM rows (TETRAD 6 getRandomWeights3): v ~ U(0, 1), weight 3v if v > 0.5 else v, normalised."""
    v = rng.random((rows, k))
    w = np.where(v > 0.5, 3 * v, v)
    return w / w.sum(1, keepdims=True)


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
    generator = card.get("generator", "standin")
    if generator not in ("standin", "tetrad"):
        raise ConfigError(f"data.generator={generator!r} is unknown; allowed: standin, tetrad")
    requested = int(round(s * p * (p - 1) / 2))
    if generator == "tetrad":
        A = tetrad_forward_dag(p, requested, rng, g.get("max_indegree"), g.get("max_outdegree"),
                               g.get("max_degree"))
    else:
        A = random_dag(p, s, rng, g.get("edges", "exact"), g.get("max_indegree"), g.get("max_degree"))
    low, high, max_cells = int(c.get("low", 2)), int(c.get("high", 5)), float(c.get("max_cells", 2**29))
    draw = (lambda: tetrad_categories(low, high, p, rng)) if generator == "tetrad" else (
        lambda: rng.integers(low, high + 1, p))
    redraws = 0
    cats = draw()
    while np.prod(cats, dtype=np.float64) > max_cells and redraws < MAX_REDRAWS:
        redraws += 1
        cats = draw()
    scheme, alpha = cpt.get("scheme", "uniform_normalised"), float(cpt.get("alpha", 1.0))
    if generator == "tetrad":
        cpts = [tetrad_cpt_rows(int(cats[j]), int(np.prod(cats[A[:, j] == 1])), rng) for j in range(p)]
    else:
        cpts = [cpt_rows(int(cats[j]), int(np.prod(cats[A[:, j] == 1])), scheme, rng, alpha) for j in range(p)]
    codes = ancestral_sample(A, cats, cpts, n, rng)
    names = [f"V{i + 1}" for i in range(p)]
    frame = pd.DataFrame(codes, columns=names)
    meta = {"true_adjacency": A, "category_redraws": redraws, "generator": generator,
            "edges_requested": requested, "edges_drawn": int(A.sum())}
    return Table(card["name"], codes.astype(float), np.zeros(n, dtype=np.int64), None, names, frame,
                 {nm: int(k) for nm, k in zip(names, cats, strict=True)}, {}, meta)
