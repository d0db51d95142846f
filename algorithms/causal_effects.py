"""Causal graphs over binary variables and exact causal-effect estimators (spec cfgan.md §1; Xu thesis 3.2.3).

Written once, used by the `cfgan` family's plugins, by the runner's causal release metrics (any generator run on
a card with a `causal_graph:` block) and by the tests.

- `CausalGraph.from_spec(spec, columns)`: the card's `causal_graph:` block (nodes from the edge lists, `sensitive`,
  `outcome`, the unjustified node set `unjustified` that defines the indirect path set, the CE context `context`),
  validated with one-line errors: an unknown column, a cycle, S not an ancestor of Y, a context that is not a
  non-descendant of S. Nodes are kept in a topological order.
- `paths(graph)`: every directed path S ~> Y; `path_edges(graph, kind)`: the edge set E_pi of the direct
  (`direct`: {S -> Y}), indirect (`indirect`: every path through a node of `unjustified`) or total (`total`: every
  path) path set, with the recanting-witness check of §1.1 (an unidentifiable set is refused).
- `cpts(V, graph, weights)`: the empirical CPTs P(v_i = 1 | pa_i) (weighted frequencies; an empty parent
  configuration falls back to the estimate without its last parent, then to 0.5, counted in `cpts.empty`).
- `outcome_weights(cpt, graph, s, edges)`: the vector w over Y's parent configurations with
  P(Y_{s|pi} = 1) = w . q_Y (the edge-based formula of §1.1 by exact enumeration over V minus S; reference
  s- = 0), linear in Y's CPT q_Y, which PSE-DR's QP uses.
- `total_effect` (back-door adjustment on Pa(S), `estimator="adjust"`, or the fully factorised formula,
  `"factorised"`, B7), `path_specific_effect`, `counterfactual_effects` (CE(o) for every context value, ordered
  o1 = all ones first, as the published o1 = (White, US)), `chi2` (two-sample, or `expected=real|generated`, B8).
- `effect_metrics(frame, graph)`: the published metric keys (`total_effect`, `indirect_discrimination`,
  `direct_discrimination`, `ce_o1`, ...) of one binary table.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import numpy as np

from privfair_cli.errors import ConfigError, DataError
from privfair_cli.metrics import contingency

log = logging.getLogger(__name__)
MAX_NODES = 22  # exact enumeration over 2^(N-1) configurations


# ---------------------------------------------------------------------------------------------- the graph
@dataclass(frozen=True)
class CausalGraph:
    nodes: tuple[str, ...]  # topological order
    parents: dict[str, tuple[str, ...]]
    sensitive: str
    outcome: str
    unjustified: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    name: str = "causal_graph"
    _desc: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_spec(cls, spec: dict, columns=None, where: str = "data.causal_graph") -> CausalGraph:
        spec = dict(spec or {})
        edges = spec.get("edges") or {}
        if not isinstance(edges, dict):
            raise ConfigError(f"{where}.edges must map each node to the list of its children")
        nodes = list(spec.get("nodes") or [])
        for a, kids in edges.items():
            kids = [kids] if isinstance(kids, str) else list(kids or [])
            for n in [a, *kids]:
                if n not in nodes:
                    nodes.append(str(n))
        roles = {"sensitive": spec.get("sensitive"), "outcome": spec.get("outcome")}
        for key, value in roles.items():
            if not value:
                raise ConfigError(f"{where}.{key} is missing; name the graph's {key} node")
            if value not in nodes:
                raise ConfigError(f"{where}.{key}={value!r} is not a node of the graph; nodes: {', '.join(nodes)}")
        if columns is not None:
            unknown = [n for n in nodes if n not in columns]
            if unknown:
                raise DataError(f"{where} names column(s) {unknown} that the data lacks; columns: "
                                f"{', '.join(map(str, columns))}")
        parents = {n: [] for n in nodes}
        for a, kids in edges.items():
            for k in [kids] if isinstance(kids, str) else list(kids or []):
                if a == k:
                    raise ConfigError(f"{where}: self-loop {a} -> {a}; a causal graph must be a DAG")
                if a not in parents[k]:
                    parents[k].append(str(a))
        order = _topological(nodes, parents, where)
        S, Y = roles["sensitive"], roles["outcome"]
        for key in ("unjustified", "context"):
            bad = [n for n in spec.get(key) or [] if n not in nodes]
            if bad:
                raise ConfigError(f"{where}.{key} names {bad}, not nodes of the graph; nodes: {', '.join(nodes)}")
        g = cls(tuple(order), {n: tuple(parents[n]) for n in order}, S, Y,
                tuple(spec.get("unjustified") or ()), tuple(spec.get("context") or ()), str(spec.get("name") or
                                                                                          "causal_graph"))
        if S not in g.ancestors(Y):
            raise ConfigError(f"{where}: sensitive={S} is not an ancestor of outcome={Y} (no directed path "
                              f"{S} -> ... -> {Y}); every effect of S on Y would be 0 by construction")
        desc = g.descendants(S)
        bad = [o for o in g.context if o in desc or o == S]
        if bad:
            raise ConfigError(f"{where}.context={list(g.context)}: {bad} descend from {S}; the counterfactual effect "
                              f"is implemented for non-descendants of the sensitive node only (spec §1.1)")
        if len(nodes) > MAX_NODES:
            raise ConfigError(f"{where}: {len(nodes)} nodes; exact enumeration allows at most {MAX_NODES}")
        return g

    @property
    def index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.nodes)}

    def children(self, node: str) -> list[str]:
        return [n for n in self.nodes if node in self.parents[n]]

    def edges(self) -> list[tuple[str, str]]:
        return [(p, n) for n in self.nodes for p in self.parents[n]]

    def descendants(self, node: str) -> set[str]:
        out, stack = set(), [node]
        while stack:
            for c in self.children(stack.pop()):
                if c not in out:
                    out.add(c)
                    stack.append(c)
        return out

    def ancestors(self, node: str) -> set[str]:
        out, stack = set(), [node]
        while stack:
            for p in self.parents[stack.pop()]:
                if p not in out:
                    out.add(p)
                    stack.append(p)
        return out

    def levels(self) -> list[list[int]]:
        """Node indices grouped by depth (roots first): a node's parents all lie in earlier levels."""
        depth: dict[str, int] = {}
        for n in self.nodes:
            depth[n] = 1 + max((depth[p] for p in self.parents[n]), default=-1)
        return [[i for i, n in enumerate(self.nodes) if depth[n] == d] for d in range(max(depth.values()) + 1)]

    def parent_mask(self) -> np.ndarray:
        """(N, N): [i, j] = 1 when node j is a parent of node i."""
        idx, M = self.index, np.zeros((len(self.nodes), len(self.nodes)), np.float32)
        for n in self.nodes:
            for p in self.parents[n]:
                M[idx[n], idx[p]] = 1
        return M


def _topological(nodes, parents, where) -> list[str]:
    indeg = {n: len(parents[n]) for n in nodes}
    ready = [n for n in nodes if indeg[n] == 0]
    order = []
    while ready:
        n = ready.pop(0)
        order.append(n)
        for c in nodes:
            if n in parents[c]:
                indeg[c] -= 1
                if indeg[c] == 0:
                    ready.append(c)
    if len(order) < len(nodes):
        left = [n for n in nodes if n not in order]
        raise ConfigError(f"{where}: the edges form a cycle through {', '.join(left)}; a causal graph must be a DAG")
    return order


# ---------------------------------------------------------------------------------------------- path sets
def paths(g: CausalGraph) -> list[tuple[str, ...]]:
    """Every directed path S ~> Y."""
    out = []

    def walk(path):
        if path[-1] == g.outcome:
            out.append(tuple(path))
            return
        for c in g.children(path[-1]):
            walk(path + [c])

    walk([g.sensitive])
    return out


def path_set(g: CausalGraph, kind: str) -> list[tuple[str, ...]]:
    every = paths(g)
    if kind == "total":
        return every
    if kind == "direct":
        return [p for p in every if len(p) == 2]
    if kind == "indirect":
        return [p for p in every if any(n in g.unjustified for n in p[1:-1])]
    raise ConfigError(f"path set {kind!r} is unknown; allowed: total, direct, indirect")


def path_edges(g: CausalGraph, kind: str) -> set[tuple[str, str]]:
    """E_pi of a path set, after the recanting-witness check (spec §1.1, B15)."""
    chosen = path_set(g, kind)
    edges = {(p[i], p[i + 1]) for p in chosen for i in range(len(p) - 1)}
    if kind == "total":
        return edges
    chosen_set = set(chosen)
    for p in paths(g):
        if (p[0], p[1]) in edges and p not in chosen_set:
            raise ConfigError(f"the {kind} path set is not identifiable by the edge-based formula (recanting "
                              f"witness {p[1]}: {g.sensitive} -> {p[1]} is in E_pi but the path "
                              f"{' -> '.join(p)} is not in pi)")
    return edges


# ---------------------------------------------------------------------------------------------- estimators
def as_matrix(frame, g: CausalGraph) -> np.ndarray:
    """The table's nodes as an (n, N) 0/1 int array in the graph's order."""
    V = np.asarray(frame[list(g.nodes)].to_numpy(), dtype=np.int64) if hasattr(frame, "columns") else np.asarray(
        frame, dtype=np.int64)
    if V.size and (V.min() < 0 or V.max() > 1):
        raise DataError("causal effects need binary (0/1) nodes")
    return V


def _config(V: np.ndarray, cols: list[int]) -> np.ndarray:
    """The configuration code of each row over the binary columns `cols` (bit b = cols[b])."""
    code = np.zeros(len(V), dtype=np.int64)
    for b, c in enumerate(cols):
        code |= V[:, c].astype(np.int64) << b
    return code


def config_counts(V: np.ndarray, cols: list[int], weights=None) -> np.ndarray:
    """Rows (or summed `weights`) per configuration of the binary columns `cols`, indexed by `_config`'s code."""
    return contingency(np.asarray(V)[:, list(cols)[::-1]], (2,) * len(cols), weights).ravel()


def conditional(V, target: int, given: list[int], weights=None, empty=None) -> np.ndarray:
    """P(V_target = 1 | V_given = c) for every configuration c (bit b = given[b]); an empty configuration takes the
    estimate without the last given variable (recursively), at the bottom 0.5. `empty` (a list) collects counts."""
    w = np.ones(len(V)) if weights is None else np.asarray(weights, float)
    K = 1 << len(given)
    n = config_counts(V, given, w)
    n1 = config_counts(V, given, w * V[:, target])
    out = np.divide(n1, n, out=np.full(K, np.nan), where=n > 0)
    miss = ~(n > 0)
    if miss.any():
        if empty is not None:
            empty.append(int(miss.sum()))
        if given:
            coarse = conditional(V, target, given[:-1], weights, None)
            out[miss] = coarse[np.arange(K)[miss] & ((1 << (len(given) - 1)) - 1)]
        else:
            out[:] = 0.5
    return out


@dataclass
class CPTs:
    graph: CausalGraph
    tables: list[np.ndarray]  # per node: P(v_i = 1 | parent configuration), bit b = parents[b]
    empty: int = 0


def cpts(V, g: CausalGraph, weights=None) -> CPTs:
    idx, empty = g.index, []
    tables = [conditional(V, i, [idx[p] for p in g.parents[n]], weights, empty) for i, n in enumerate(g.nodes)]
    if sum(empty):
        log.warning("%d empty parent configurations in the CPTs fell back to coarser estimates", sum(empty))
    return CPTs(g, tables, int(sum(empty)))


def _all_configs(N: int) -> np.ndarray:
    return ((np.arange(1 << N)[:, None] >> np.arange(N)[None, :]) & 1).astype(np.int64)


def outcome_weights(cpt: CPTs, s: int, edges) -> np.ndarray:
    """w over Y's parent configurations: P(Y_{s|pi} = 1) = w . q_Y (reference s- = 0 on the edges not in E_pi)."""
    g, idx = cpt.graph, cpt.graph.index
    S, Y = idx[g.sensitive], idx[g.outcome]
    others = [i for i in range(len(g.nodes)) if i not in (S, Y)]
    C = np.zeros((1 << len(others), len(g.nodes)), np.int64)
    C[:, others] = _all_configs(len(others))
    prob = np.ones(len(C))

    def parent_values(i):  # (configurations, parents of i), S set to s on the edges in E_pi and to 0 on the others
        n = g.nodes[i]
        P = np.zeros((len(C), len(g.parents[n])), np.int64)
        for b, p in enumerate(g.parents[n]):
            P[:, b] = C[:, idx[p]] if p != g.sensitive else (s if (p, n) in edges else 0)
        return P

    for i in others:
        P = parent_values(i)
        p1 = cpt.tables[i][_config(P, range(P.shape[1]))]
        prob *= np.where(C[:, i] == 1, p1, 1 - p1)
    P = parent_values(Y)
    return config_counts(P, range(P.shape[1]), prob)


def interventional(cpt: CPTs, s: int, edges) -> float:
    return float(outcome_weights(cpt, s, edges) @ cpt.tables[cpt.graph.index[cpt.graph.outcome]])


def path_specific_effect(cpt: CPTs, kind: str) -> float:
    """SE_pi(s+, s-) = P(Y_{s+|pi} = 1) - P(Y_{s-} = 1) with the edge-based formula (spec §1.1)."""
    edges = path_edges(cpt.graph, kind)
    return interventional(cpt, 1, edges) - interventional(cpt, 0, edges)


def total_effect(V, g: CausalGraph, estimator: str = "adjust", weights=None, cpt: CPTs | None = None) -> float:
    """TE by back-door adjustment on W = Pa(S) (`adjust`) or by the factorised formula (`factorised`, B7)."""
    if estimator == "factorised":
        return path_specific_effect(cpt if cpt is not None else cpts(V, g, weights), "total")
    if estimator != "adjust":
        raise ConfigError(f"te_estimator={estimator!r} is unknown; allowed: adjust, factorised")
    return _adjusted(V, g, list(g.parents[g.sensitive]), [], None, weights)


def _adjusted(V, g, W: list[str], O: list[str], o, weights) -> float:
    """sum_w P(w | o) [P(Y=1 | S=1, w, o) - P(Y=1 | S=0, w, o)]; NaN when O = o has no row."""
    idx = g.index
    w = np.ones(len(V)) if weights is None else np.asarray(weights, float)
    if O:
        keep = np.all(V[:, [idx[c] for c in O]] == np.asarray(o)[None, :], axis=1)
        if w[keep].sum() <= 0:
            return float("nan")
        V, w = V[keep], w[keep]
    Wi = [idx[c] for c in W]
    y = conditional(V, idx[g.outcome], [idx[g.sensitive], *Wi], w)
    pw = config_counts(V, Wi, w) / w.sum()
    codes = np.arange(1 << len(Wi))
    return float(pw @ (y[(codes << 1) | 1] - y[codes << 1]))


def contexts(g: CausalGraph) -> list[tuple[int, ...]]:
    """o1, o2, ...: every value combination of the context, all ones first (o1 = (White, US) in Adult)."""
    return list(itertools.product((1, 0), repeat=len(g.context)))


def counterfactual_effects(V, g: CausalGraph, weights=None) -> list[float]:
    """CE(o) = sum_w P(w|o) [P(Y=1|S=1,w,o) - P(Y=1|S=0,w,o)], W = Pa(S) minus O, for every o (O non-descendants)."""
    W = [p for p in g.parents[g.sensitive] if p not in g.context]
    return [_adjusted(V, g, W, list(g.context), o, weights) for o in contexts(g)]


def chi2(real, other, expected: str = "two_sample") -> float:
    """chi^2 over all 2^N joint cells (B8): two-sample sum (n_g - n_r)^2 / (n_g + n_r), or with the real or the
    generated counts as the expected ones (`real`, `generated`)."""
    real, other = np.asarray(real, np.int64), np.asarray(other, np.int64)
    cols = list(range(real.shape[1]))
    nr, ng = config_counts(real, cols), config_counts(other, cols)
    den = {"two_sample": nr + ng, "real": nr, "generated": ng}.get(expected)
    if den is None:
        raise ConfigError(f"chi2 expected={expected!r} is unknown; allowed: two_sample, real, generated")
    keep = den > 0
    return float(((ng - nr)[keep] ** 2 / den[keep]).sum())


def effect_metrics(frame, g: CausalGraph, te_estimator: str = "adjust") -> dict[str, float]:
    """The published effect keys of one binary table, every probability its own frequency (spec §1.1, §4)."""
    V = as_matrix(frame, g)
    cpt = cpts(V, g)
    out = {"total_effect": total_effect(V, g, te_estimator, cpt=cpt)}
    if path_set(g, "direct"):
        out["direct_discrimination"] = path_specific_effect(cpt, "direct")
    if g.unjustified and path_set(g, "indirect"):
        out["indirect_discrimination"] = path_specific_effect(cpt, "indirect")
    if g.context:
        out |= {f"ce_o{k + 1}": v for k, v in enumerate(counterfactual_effects(V, g))}
    return out | {"cpt_empty_configs": float(cpt.empty)}
