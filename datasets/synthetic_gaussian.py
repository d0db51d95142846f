"""`synthetic_gaussian`: a random weighted DAG and a linear-Gaussian sample from it (privpc.md §1.4, pcalg
`randomDAG(p, prob = s, lB = 0.1, uB = 1)` + `rmvDAG(n, dag, errDist = "normal")`).

Node order 0..p-1 is the topological order; each forward pair i < j is an edge independently with probability
`s` (expected s p(p-1)/2 edges), weight U(0.1, 1). X_j = sum_{k in pa(j)} w_kj X_k + e_j, e_j ~ N(0, 1), not
standardised. The DAG goes into `meta["true_adjacency"]` (A[i, j] = 1 for i -> j), its weights into
`meta["true_weights"]`. Everything is drawn from the run's data stream, so eps never changes the data.
"""

from __future__ import annotations

import numpy as np

from privfair_cli.errors import DataError

from . import Table

VIEWS = ("numeric", "graph_reference")  # unbounded real columns; the generating DAG is the reference


def random_dag(p: int, s: float, rng: np.random.Generator, lo: float = 0.1, hi: float = 1.0) -> np.ndarray:
    """Weighted adjacency W (p x p, upper triangular): W[i, j] != 0 for the edge i -> j."""
    edges = np.triu(rng.random((p, p)) < s, 1)
    return np.where(edges, rng.uniform(lo, hi, (p, p)), 0.0)


def sample_linear_gaussian(W: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n rows of X = X W + E, E ~ N(0, I), i.e. X = E (I - W)^-1."""
    E = rng.standard_normal((n, len(W)))
    return np.linalg.solve((np.eye(len(W)) - W).T, E.T).T


def generate(card, rng: np.random.Generator) -> Table:
    p, s, n = int(card["p"]), float(card["s"]), int(card["n"])
    if p < 2 or not 0 <= s <= 1 or n < 4:
        raise DataError(f"data={card['name']}: need p >= 2, 0 <= s <= 1 and n >= 4 (got p={p}, s={s}, n={n})")
    W = random_dag(p, s, rng, *card.get("weights", (0.1, 1.0)))
    X = sample_linear_gaussian(W, n, rng)
    names = [f"V{i + 1}" for i in range(p)]
    meta = {"true_adjacency": (W != 0).astype(np.int8), "true_weights": W}
    return Table(card["name"], X, np.zeros(n, dtype=np.int64), None, names, meta=meta)
