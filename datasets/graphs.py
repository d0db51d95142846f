"""Graph datasets (Cora, CiteSeer, Wiki) for the network-embedding family (dpne.md §1, §5.1).

A graph card names two text files: `edges` (one `src dst` pair per line, whitespace-separated, integer node ids)
and `labels` (one `node class` pair per line). `read` parses them; `encode` returns a `Table` whose `y` holds the
labels in node order, `X` has no columns (structure only, no node features) and `meta["graph"]` is a `Graph`.

Preprocessing rule (dpne.md §1.1), the same for every graph card:
1. vertices are the nodes of the label file (ids must be exactly 0..n-1), so isolated vertices are kept;
2. an edge-list id that is not a vertex is an error (`DataError` naming the first one and its line);
3. direction is dropped (`(u, v)` and `(v, u)` are one undirected edge), self-loops are dropped, duplicate lines
   and reciprocated pairs count once.
What the rule gives (measured, tests/test_dpne.py): Cora 2,708 vertices / 5,278 edges / 7 classes (5,429 lines);
CiteSeer 3,312 / 4,551 / 6 (4,732 lines, 124 self-loops, 1 duplicate; 48 vertices isolated); Wiki 2,405 / 11,596
/ 17 (17,981 lines, 1,458 duplicate lines, 1,996 self-loops; 42 isolated). The published counts (2,708 / 5,429 / 7,
3,312 / 4,732 / 6, 2,405 / 17,981 / 19) are the cards' `published:` block; they count raw lines and, for Wiki,
19 labels of which only 17 occur.

Card keys beyond the file list: `isolated` (`keep`: isolated vertices stay, rows of P are zero, spec §1.3;
`error`: refuse such a graph), `task` (`vertex_classification` | `link_prediction`, which evaluation a run does),
`train_ratio`, `eval_splits`, `link_holdout` (privfair_cli/evaluate.py `embedding`).

The per-run split (`split`): for vertex classification the whole graph is embedded (the evaluator draws its
node splits); for link prediction a fraction `link_holdout` of the edges, never from a random spanning forest (so
the residual graph keeps the components of the full one, the node2vec protocol of dpne.md §5.4.3), is removed
before embedding and becomes the positive test pairs, with as many negatives drawn uniformly among non-adjacent,
non-identical pairs of the *full* graph. `link_holdout: 0` is dpne.md §5.4's protocol without a hold-out (what the
thesis' numbers point to): the whole graph is embedded, every edge is a positive test pair, with as many negatives.
Its accuracy measures how well the embedding reconstructs edges it was trained on, so such a run carries the
warning `NO_HOLDOUT` in its result's `warnings` (`SPLIT_WARNINGS` of the tables' meta, datasets `split_warnings`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp

from privfair_cli.datasets import Table
from privfair_cli.errors import DataError

TASKS = ("vertex_classification", "link_prediction")
SPLIT_WARNINGS = "split_warnings"  # the tables' meta key of the split's premise warnings (datasets split_warnings)
NO_HOLDOUT = ("data.link_holdout=0: link prediction is tested on edges the embedding saw (the whole graph is "
              "embedded and every edge is a positive test pair, dpne.md §5.4 without a hold-out): the accuracy "
              "measures how well the embedding reconstructs its training edges, not how it predicts unseen ones")
VIEWS = ("network",)  # what a graph card provides (schema.card_views); the card's `label` adds the vertex classes


@dataclass
class Graph:
    """An undirected simple graph: `adjacency` symmetric 0/1 CSR (n x n, no diagonal), `node_ids` the vertex of
    each row (the label file's ids), `counts` what the preprocessing rule saw. For link prediction `pairs` /
    `pair_labels` hold the held-out positives and the sampled negatives (vertex index pairs, 1 = edge)."""

    adjacency: sp.csr_matrix
    node_ids: np.ndarray
    counts: dict = field(default_factory=dict)
    pairs: np.ndarray | None = None
    pair_labels: np.ndarray | None = None

    @property
    def n(self) -> int:
        return self.adjacency.shape[0]

    def edges(self) -> np.ndarray:
        """Unique undirected edges as (u, v) rows with u < v."""
        upper = sp.triu(self.adjacency, k=1).tocoo()
        return np.column_stack([upper.row, upper.col]).astype(np.int64)

    def digest(self) -> str:
        """sha256 of the edge set and size: the cache key of the matrices derived from this graph."""
        h = hashlib.sha256(np.int64(self.n).tobytes())
        h.update(np.ascontiguousarray(self.edges()).tobytes())
        return h.hexdigest()[:24]


def _int_pairs(path, what: str) -> np.ndarray:
    rows = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            try:
                if len(parts) != 2:
                    raise ValueError
                rows.append((int(parts[0]), int(parts[1])))
            except ValueError:
                raise DataError(f"{path}: line {lineno} is not a `{what}` pair of integers: {line.strip()!r}") from None
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


def build(edges: np.ndarray, n: int, source: str = "edge list") -> Graph:
    """The simple undirected graph of a raw (possibly directed, duplicated, self-looped) edge list on 0..n-1."""
    bad = np.flatnonzero((edges < 0).any(axis=1) | (edges >= n).any(axis=1))
    if bad.size:
        u, v = edges[bad[0]]
        raise DataError(f"{source}: line {bad[0] + 1} names node {u if not 0 <= u < n else v}, which is not a "
                        f"vertex of the label file (ids 0..{n - 1}); fix the edge list or add the node's label")
    loops = edges[:, 0] == edges[:, 1]
    directed = np.unique(edges, axis=0)
    und = np.sort(edges[~loops], axis=1)
    und = np.unique(und, axis=0)
    adj = sp.coo_matrix((np.ones(len(und)), (und[:, 0], und[:, 1])), shape=(n, n)).tocsr()
    adj = ((adj + adj.T) > 0).astype(np.float64).tocsr()
    degree = np.asarray(adj.sum(axis=1)).ravel()
    counts = {"lines": int(len(edges)), "duplicate_lines": int(len(edges) - len(directed)),
              "self_loop_lines": int(loops.sum()), "edges": int(len(und)), "vertices": int(n),
              "isolated": int((degree == 0).sum())}
    return Graph(adj, np.arange(n), counts)


def read(paths, card) -> dict:
    files = dict(zip(card["files"], paths, strict=True))
    labels = _int_pairs(files[card["labels"]], "node class")
    n = len(labels)
    order = np.argsort(labels[:, 0])
    if not np.array_equal(labels[order, 0], np.arange(n)):
        raise DataError(f"{files[card['labels']]}: node ids must be exactly 0..{n - 1}, once each")
    edges = _int_pairs(files[card["edges"]], "src dst")
    return {"graph": build(edges, n, str(files[card["edges"]])), "labels": labels[order, 1]}


def encode(raw: dict, card) -> Table:
    graph, y = raw["graph"], raw["labels"]
    graph.counts["classes"] = int(len(np.unique(y)))
    return Table(card["name"], np.zeros((graph.n, 0)), y.astype(np.int64), None, [], meta={"graph": graph})


def check(graph: Graph, card: dict) -> None:
    """Refuse a graph the card does not accept (isolated vertices with `isolated: error`)."""
    if card.get("isolated", "keep") == "error" and graph.counts["isolated"]:
        raise DataError(f"data={card['name']}: {graph.counts['isolated']} isolated vertices (no edge but a "
                        f"self-loop or none); set data.isolated=keep to embed them (their rows of P are zero)")


def spanning_forest(adj: sp.csr_matrix, rng: np.random.Generator) -> sp.csr_matrix:
    """A uniformly-weighted random spanning forest (the minimum spanning tree under random edge weights)."""
    upper = sp.triu(adj, k=1).tocoo()
    weights = sp.coo_matrix((rng.random(upper.nnz) + 1e-9, (upper.row, upper.col)), shape=adj.shape)
    forest = sp.csgraph.minimum_spanning_tree(weights.tocsr())
    return ((forest + forest.T) > 0).astype(np.float64).tocsr()


def negatives(adj: sp.csr_matrix, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` distinct vertex pairs (u < v), uniform among non-adjacent non-identical pairs of `adj`."""
    n, out, seen = adj.shape[0], np.zeros((0, 2), np.int64), set()
    while len(out) < count:
        cand = np.sort(rng.integers(0, n, size=(2 * (count - len(out)) + 16, 2)), axis=1)
        cand = cand[(cand[:, 0] != cand[:, 1]) & (np.asarray(adj[cand[:, 0], cand[:, 1]]).ravel() == 0)]
        cand = np.unique(cand, axis=0)
        keys = cand[:, 0] * n + cand[:, 1]
        cand = cand[[k not in seen for k in keys]]
        cand = cand[rng.permutation(len(cand))][: count - len(out)]
        seen.update((cand[:, 0] * n + cand[:, 1]).tolist())
        out = np.vstack([out, cand])
    return out


def link_split(graph: Graph, holdout: float, rng: np.random.Generator) -> Graph:
    """The residual graph (holdout edges removed) carrying the labelled test pairs (dpne.md §5.4 with holdout);
    holdout 0: the full graph carrying all its edges and as many negatives (dpne.md §5.4 without a hold-out)."""
    edges = graph.edges()
    if holdout == 0:
        if len(edges) < 1:
            raise DataError("link prediction: the graph has no edge to test")
        neg = negatives(graph.adjacency, len(edges), rng)
        labels = np.repeat([1, 0], [len(edges), len(neg)])
        counts = graph.counts | {"held_out": 0, "test_edges": int(len(edges))}
        return replace(graph, counts=counts, pairs=np.vstack([edges, neg]), pair_labels=labels)
    forest = spanning_forest(graph.adjacency, rng)
    removable = np.flatnonzero(np.asarray(forest[edges[:, 0], edges[:, 1]]).ravel() == 0)
    n_out = min(int(round(holdout * len(edges))), len(removable))
    if n_out < 2:
        raise DataError(f"link prediction: data.link_holdout={holdout} holds out {n_out} edges; raise it (or set 0: "
                        f"no hold-out)")
    held = edges[rng.choice(removable, size=n_out, replace=False)]
    keep = np.ones(len(edges), bool)
    keep[np.isin(edges[:, 0] * graph.n + edges[:, 1], held[:, 0] * graph.n + held[:, 1])] = False
    kept = edges[keep]
    adj = sp.coo_matrix((np.ones(len(kept)), (kept[:, 0], kept[:, 1])), shape=graph.adjacency.shape).tocsr()
    adj = ((adj + adj.T) > 0).astype(np.float64).tocsr()
    neg = negatives(graph.adjacency, n_out, rng)
    pairs = np.vstack([held, neg])
    labels = np.repeat([1, 0], [n_out, len(neg)])
    counts = graph.counts | {"edges": int(len(kept)), "held_out": int(n_out)}
    return replace(graph, adjacency=adj, counts=counts, pairs=pairs, pair_labels=labels)


def split(table: Table, card: dict, rng: np.random.Generator) -> tuple[Table, Table]:
    """The run's (train, test) for a graph table: the table twice for vertex classification, the residual graph
    with its labelled pairs (both sides) for link prediction."""
    task = card.get("task", "vertex_classification")
    if task not in TASKS:
        raise DataError(f"data.task={task!r} is unknown; allowed: {', '.join(TASKS)}")
    graph = table.meta["graph"]
    check(graph, card)
    meta = table.meta | {"card": dict(card)}
    if task == "vertex_classification":
        out = Table(table.name, table.X, table.y, None, [], meta=meta)
        return out, out
    holdout = float(card.get("link_holdout", 0.5))
    residual = link_split(graph, holdout, rng)
    warned = {SPLIT_WARNINGS: [NO_HOLDOUT]} if holdout == 0 else {}
    out = Table(table.name, table.X, table.y, None, [], meta=meta | {"graph": residual} | warned)
    return out, out


def validate(card: dict) -> None:
    """The graph keys of a card, checked before any data is read (ConfigError naming the key)."""
    from privfair_cli.errors import ConfigError

    if card.get("task", "vertex_classification") not in TASKS:
        raise ConfigError(f"data.task={card.get('task')!r} is unknown; allowed: {', '.join(TASKS)}")
    if card.get("isolated", "keep") not in ("keep", "error"):
        raise ConfigError(f"data.isolated={card.get('isolated')!r} is unknown; allowed: keep, error")
    def number(value) -> bool:
        return not isinstance(value, bool) and isinstance(value, int | float)

    ratio, holdout = card.get("train_ratio", 0.5), card.get("link_holdout", 0.5)
    if not (number(ratio) and 0 < ratio < 1):
        raise ConfigError(f"data.train_ratio={ratio!r} must be in (0, 1)")
    if not (number(holdout) and 0 <= holdout < 1):
        raise ConfigError(f"data.link_holdout={holdout!r} must be in [0, 1) (0: no hold-out, the whole graph is "
                          f"embedded and every edge tested)")
    splits = card.get("eval_splits", 1)
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        raise ConfigError(f"data.eval_splits={splits!r} must be an integer >= 1")
