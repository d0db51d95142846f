"""The neighbouring datasets of an audit (add/remove neighbours): the canary record or edge of the distinguishing
test (`audit.canary=extreme | row`), the random canaries of the one-run test, a table with records appended or an
edge added or removed, and the audited breadth-first subgraph of a network."""

from __future__ import annotations

import numpy as np


def canary_record(table, how: str) -> tuple[dict, np.ndarray]:
    """The canary (X row, y, s, discrete codes; on a network, an edge) and the index of D's rows (all of them for
    `extreme`; all but the canary's for `row`)."""
    n = len(table)
    if "graph" in table.meta:
        return {"edge": graph_canary(table.meta["graph"], how)}, np.arange(n)
    if how == "extreme":
        rec = {"X": np.ones(table.d), "y": _rarer(table.y), "s": None if table.s is None else
               _rarer(table.s), "frame": None}
        if table.frame is not None:
            rec["frame"] = {c: int(np.argmin(np.bincount(table.frame[c].to_numpy(int),
                                                         minlength=table.domain.get(c, 1))))
                            for c in table.frame.columns}
        return rec, np.arange(n)
    far = int(np.argmax(np.abs(table.X - table.X.mean(axis=0)).sum(axis=1))) if table.X.size else 0
    rec = {"X": table.X[far], "y": table.y[far], "s": None if table.s is None else table.s[far],
           "frame": None if table.frame is None else {c: int(table.frame[c].iloc[far]) for c in table.frame.columns}}
    return rec, np.delete(np.arange(n), far)


def graph_canary(graph, how: str) -> tuple[int, int]:
    """Edge-level neighbours (the networks' privacy unit): `extreme` adds an edge between the two vertices of
    lowest degree (>= 1) that are not adjacent, whose walk probabilities one edge moves the most; `row` removes
    the edge between the two endpoints of highest degree sum (D = the network without it)."""
    degree = np.asarray(graph.adjacency.sum(axis=1)).ravel()
    if how == "row":
        e = graph.edges()
        u, v = e[int(np.argmax(degree[e[:, 0]] + degree[e[:, 1]]))]
        return int(u), int(v)
    order = [int(i) for i in np.argsort(np.where(degree > 0, degree, np.inf), kind="stable") if degree[i] > 0]
    u = order[0]
    adjacent = set(graph.adjacency[u].indices.tolist())
    v = next(w for w in order[1:] if w not in adjacent)
    return u, v


def with_edge(table, edge: tuple[int, int], present: bool):
    """`table` whose network has (present) or lacks the edge `edge`."""
    from dataclasses import replace

    from privfair_cli.datasets import graphs

    graph = table.meta["graph"]
    e = graph.edges()
    e = e[~((e[:, 0] == min(edge)) & (e[:, 1] == max(edge)))]
    if present:
        e = np.vstack([e, np.sort(np.asarray(edge))[None]])
    new = graphs.build(e, graph.n, "audit canary")
    new = replace(new, node_ids=graph.node_ids)
    return replace(table, meta=table.meta | {"graph": new})


def subgraph(table, rows: int, rng: np.random.Generator):
    """The network induced on the first `rows` vertices of a breadth-first search from a random vertex."""
    from dataclasses import replace

    from scipy.sparse.csgraph import breadth_first_order

    from privfair_cli.datasets import graphs

    graph = table.meta["graph"]
    if graph.n <= rows:
        return table
    start = int(np.argmax(np.asarray(graph.adjacency.sum(axis=1)).ravel() * rng.random(graph.n)))
    order = breadth_first_order(graph.adjacency, start, directed=False, return_predecessors=False)
    keep = np.sort(np.concatenate([order, np.setdiff1d(np.arange(graph.n), order)])[:rows])
    index = np.full(graph.n, -1)
    index[keep] = np.arange(len(keep))
    e = index[graph.edges()]
    new = replace(graphs.build(e[(e >= 0).all(axis=1)], len(keep), "audit subgraph"), node_ids=graph.node_ids[keep])
    return replace(table, X=table.X[keep], y=table.y[keep], meta=table.meta | {"graph": new})


def _rarer(v: np.ndarray):
    values, counts = np.unique(v, return_counts=True)
    return values[np.argmin(counts)] if len(values) else 0


def with_records(table, recs: list[dict]):
    """`table` with `recs` appended as rows (every view: X, y, s, the discrete frame, row_* meta)."""
    import pandas as pd

    from privfair_cli.datasets import Table

    if not recs:
        return table
    k = len(recs)
    X = np.vstack([table.X] + [np.asarray(r["X"], dtype=table.X.dtype)[None] for r in recs])
    y = np.concatenate([table.y, np.asarray([r["y"] for r in recs], dtype=table.y.dtype)])
    s = None if table.s is None else np.concatenate([table.s, np.asarray([r["s"] for r in recs], table.s.dtype)])
    frame = None
    if table.frame is not None:
        extra = pd.DataFrame([r["frame"] for r in recs], columns=table.frame.columns).astype(table.frame.dtypes)
        frame = pd.concat([table.frame, extra], ignore_index=True)
    meta = {key: v for key, v in table.meta.items() if not key.startswith("row_")}
    for key, v in table.meta.items():
        if key.startswith("row_"):
            if key == "row_id":
                fill = (np.max(v) + 1 if len(v) else 0) + np.arange(k)
            elif key in ("row_labelled", "row_is_test"):
                fill = np.full(k, key == "row_labelled")
            else:  # the first row's values, whatever their shape (row_attributes holds one row per record)
                fill = np.repeat(v[:1], k, axis=0)
            meta[key] = np.concatenate([v, np.asarray(fill).astype(v.dtype)], axis=0)
    return Table(table.name, X, y, s, table.feature_names, frame, table.domain, table.roles, meta)


def one_run_canaries(table, m: int, rng: np.random.Generator) -> tuple[list[dict], np.ndarray, np.ndarray]:
    """The one-run test's `m` canaries: random corners of the feature box with random labels and groups (the
    discrete attributes of D's first row); returns the records and their X and y."""
    X = (rng.random((m, table.d)) < 0.5).astype(float)
    y = rng.integers(0, 2, m)
    s = rng.integers(0, 2, m)
    frame_row = None
    if table.frame is not None:
        frame_row = {c: int(table.frame[c].iloc[0]) for c in table.frame.columns}
    return [{"X": X[i], "y": y[i], "s": s[i], "frame": frame_row} for i in range(m)], X, y
