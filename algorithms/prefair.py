"""Private fair data release: MST, Greedy-PreFair, Exponential-PreFair and `pfdr` (prefair.md; seed 002, PreFair,
Pujol, Gilad, Machanavajjhala; MST of McKenna, Miklau, Sheldon 2021).

All four share one pipeline (prefair.md §3) and differ only in how the spanning tree is selected:

1. rho = cdp_rho(eps, delta) (CKS20, §2.3); sigma = sqrt(3 / (2 rho)); budget rho/3 per step (§2.4).
2. 1-way marginals of all d attributes, one Gaussian release: L2 sensitivity sqrt(d), noise s1 = sigma sqrt(d).
3. Domain compression (post-processing): values with noisy count < 3 s1 merge into one rare bucket.
4. Selection (rho/3) on the L1 scores q_ij = |M_ij(D') - Nhat phat_i phat_j|_1 (sensitivity 1):
   `mst`: private Kruskal, d-1 exponential-mechanism rounds at eps_em = sqrt(8 (rho/3) / (d-1)) (eps^2/8-zCDP);
   `prefair_greedy` / `pfdr` (Algorithm 2): the same, never joining an outcome to a node outside A u O;
   `prefair_optimal` (Algorithm 1): q + N(0, r / (2 rho/3)) for all r pairs at once, then an exact search
   for the fair spanning tree of largest noisy weight.
5. The selected edges' 2-way marginals, one Gaussian release: sensitivity sqrt(d-1), noise sigma sqrt(d-1).
6. Tree model fit and rounding sampler (`tree_model.py`), then the rare buckets are decoded uniformly.
Every release goes through the ledger (zCDP accountant; the run's privacy block shows rho and its (eps, delta)).
`is_fair(T)` (§1.3) is asserted on every tree the fair generators return.

Deviations and choices (prefair.md §11 item numbers):
- Model fitting (`estimator`, A23): `tree` (default) is the spec's fallback (§3, "simpler fallback"): node
  marginals by inverse-variance combination + simplex projection, edges by IPF; same measurements, consistent
  marginals, not bit-identical to Private-PGM. `pgm` is the paper's estimator, Private-PGM's mirror descent (mbi
  2.x, the optional `pgm` extra; `tree_model.fit_pgm`, 5000 iterations as the MST reference code), whose tree
  marginals feed the same rounding sampler (the reference code samples with Private-PGM's own `synthetic_data`,
  also a rounding sampler). Both are post-processing of the same measurements. Selection's product model is the
  same projection of the 1-way measurements under either.
- A1: Exponential-PreFair's noise is sigma_q = sqrt(r / (2 rho_sel)) (the proof's, private); the reference
  code's typo is reproduced only by `search_variant: ref_code`. A7: `search_variant: exact` (default): A* over
  fair forests in a canonical edge order (each forest generated once), heuristic = weight of the unconstrained
  minimum completion (admissible), so the result is the optimum of Algorithm 1; `max_expansions` bounds the
  search. `search_variant: ref_code` replays the reference code's selection, which produced the published
  Exponential-PreFair numbers: weights max(q + N(0, rho_sel / (2 r)), 0) (A1's typo, about no noise; drawn outside
  the ledger, so the run claims `heuristic` and warns), then its heap search (A7 items 1-4, `ref_code_search`:
  alternating-sign keys, no children while an isomorphic forest is queued; ties by push order instead of `id()`).
- A4: delta defaults to 1e-9 (the plugins' `default_delta`); `conversion: rdp_classic` uses Thm 4 instead.
- A8: the candidate filter is correct by default; `ref_code_candidate_filter: true` replays the reference
  code's skip-after-remove bug (its trees can be unfair: `tree_fair` is then 0 instead of an error).
  A9: outcome-outcome edges are allowed (the paper's rule).
- A10: Adult's admissible set is the reference code's; `admissible: [...]` overrides the card's roles.
- A11: int(Nhat) rows by default; `rows: n_original` releases len(data) rows: the exact count is released outside
  the ledger, so such a run claims `heuristic` (`claims()`; the zCDP proof holds only where n is public).
- eps = inf is the noise-free limit: rho = inf in the ledger, exact marginals, the best tree (selection by
  argmax); the estimator keeps the variance ratios of sigma = 1 (it uses variances only through their ratios).
- Evaluation (§9) is the runner's generator evaluator (`privfair_cli/evaluate.py`): TVD / ACD in
  `privfair_cli/metrics.py` (marginals with <= `max_cells` cells; ACD both as Bergsma's corrected Cramér's V, `acd`,
  and the reference code's variant, `acd_ref_code`, A13; conditional gaps both as the reference code's per-group
  means, `cdp`, ..., and the seed's weighted form, `cdp_weighted`, A14), downstream classifiers in
  `privfair_cli/downstream.py` (the reference code's MLP rebuilt in numpy; "linear regression" clipped to [0, 1]
  before rounding; `mlp_inputs: standardised` z-scores the MLP's inputs by the released table's own statistics,
  a departure from A15's raw codes that Table 3 uses because raw KDD codes make the MLP predict no positive).
  TVD and ACD compare with the released (training) table; downstream models train on
  synthetic data and are tested on the run's test split; set `data.test_size=0` for the paper's protocol
  (test = the full real data, A15).
- A card without a `discrete:` view or without `roles.outcome` / `roles.admissible` is refused in one line naming
  the key to add.
- Compas gaps: the published cells are labelled `sensitive=sex`, but the published MST gaps (DP ~0.25 at every
  eps) match the gaps between Race codes 1 and 0 (African-American vs Caucasian), not Sex (~0.05): the card's
  `roles.audit: [Race]` adds those gaps as `dp_race`, ..., and the Compas comparisons use them, with the Sex
  gaps as extra rows (docs/families/prefair.md, Compas).
"""

from __future__ import annotations

import heapq
import json
import math
import time
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from privfair_cli import metrics as core_metrics
from privfair_cli.algorithms.tree_model import (
    Measurement,
    TreeModel,
    fit_pgm,
    fit_tree,
    neighbours,
    project_simplex,
    traverse,
)
from privfair_cli.downstream import ReleaseEvaluation
from privfair_cli.errors import ConfigError, DataError
from privfair_cli.privacy import accountants
from privfair_cli.privacy.mechanisms import exponential, gaussian_zcdp
from privfair_cli.privacy.noise import noise_source
from privfair_cli.registry import Plugin, register
from privfair_cli.typed import bounds

DEFAULT_DELTA = 1e-9


# ---------------------------------------------------------------------------------------------- fairness model
@dataclass(frozen=True)
class Roles:
    """Attribute indices: protected P, admissible A, outcome O (§1.1); the rest are inadmissible."""

    protected: frozenset[int]
    admissible: frozenset[int]
    outcome: frozenset[int]

    @classmethod
    def from_names(cls, columns: list[str], roles: dict, admissible_override=None, data_name: str = "") -> Roles:
        where = f"data={data_name}" if data_name else "the dataset"
        card = f"configs/data/{data_name}.yaml" if data_name else "its card"
        raw = dict(roles or {})
        if admissible_override is not None:
            raw["admissible"] = list(admissible_override)
        sets = {}
        for key in ("protected", "admissible", "outcome"):
            names = list(raw.get(key) or [])
            unknown = [n for n in names if n not in columns]
            if unknown:
                raise DataError(f"{where}: roles.{key} names {unknown}, not attributes of its discrete view")
            sets[key] = frozenset(columns.index(n) for n in names)
        if not sets["outcome"]:
            raise ConfigError(f"{where}: the card has no `roles.outcome`; a release is evaluated on its outcome "
                              f"attribute: add roles: {{outcome: [...]}} to {card}")
        if not sets["admissible"]:
            raise ConfigError(
                f"{where}: the card has no `roles.admissible`, so no fair spanning tree can connect the outcome to "
                f"the other attributes (PreFair §3 Prop. 5 needs A non-empty): add roles: {{admissible: [...]}} "
                f"to {card} (or set algo.admissible)")
        if (sets["protected"] & sets["admissible"]) or (sets["protected"] & sets["outcome"]) or (
                sets["admissible"] & sets["outcome"]):
            raise ConfigError(f"{where}: roles protected / admissible / outcome must be disjoint ({card})")
        return cls(sets["protected"], sets["admissible"], sets["outcome"])

    def allowed(self, i: int, j: int) -> bool:
        """Greedy-PreFair's local rule (Algorithm 2, line 6; A9): an outcome's neighbours lie in A u O."""
        ok = self.admissible | self.outcome
        return not ((i in self.outcome and j not in ok) or (j in self.outcome and i not in ok))


def is_fair(edges, d: int, roles: Roles) -> bool:
    """§1.3: every P-O path of the forest contains an admissible node. Equivalently, no component of the forest
    with the admissible nodes removed holds both a protected and an outcome attribute."""
    label = np.arange(d)
    for i, j in edges:
        if i in roles.admissible or j in roles.admissible:
            continue
        a, b = label[i], label[j]
        label[label == b] = a
    p = {int(label[i]) for i in roles.protected}
    return not any(int(label[o]) in p for o in roles.outcome)


# ---------------------------------------------------------------------------------------------- selection
def pairs_of(d: int) -> tuple[np.ndarray, np.ndarray]:
    iu = np.array(list(combinations(range(d), 2)), dtype=np.int64).reshape(-1, 2)
    return iu[:, 0], iu[:, 1]


def ref_code_filter(pairs: list[tuple[int, int]], roles: Roles) -> list[tuple[int, int]]:
    """The reference code's candidate filter (A8): removing from a list while iterating over it skips the
    element after every removed one, so some forbidden pairs stay candidates."""
    out, k = list(pairs), 0
    while k < len(out):
        if not roles.allowed(*out[k]):
            del out[k]
        k += 1
    return out


def private_kruskal(q: np.ndarray, I: np.ndarray, J: np.ndarray, d: int, rho_sel: float, rng, ledger,
                    algo: str) -> list[tuple[int, int]]:
    """d-1 exponential-mechanism rounds over the candidate pairs joining two components (MST §3 step 5c)."""
    eps_em = accountants.zcdp_exponential_eps(rho_sel, d - 1)
    comp = np.arange(d)
    edges = []
    for t in range(d - 1):
        open_ = np.flatnonzero(comp[I] != comp[J])
        if open_.size == 0:
            raise DataError(f"{algo}: no allowed pair joins the remaining components (round {t + 1}); the "
                            "roles admit no fair spanning tree")
        k = open_[exponential(q[open_], 1.0, eps_em, rng, ledger, note=f"selection round {t + 1}",
                              accounting="zcdp")]
        i, j = int(I[k]), int(J[k])
        comp[comp == comp[j]] = comp[i]
        edges.append((i, j))
    return edges


def _completion(start_label: np.ndarray, order_i, order_j, w_sorted, first: int, d: int, n_edges: int):
    """Weight of the cheapest completion of a forest with edges from position `first` on (Kruskal), or None."""
    label = start_label.copy()
    need, total = d - 1 - n_edges, 0.0
    for k in range(first, len(w_sorted)):
        if need == 0:
            break
        a, b = label[order_i[k]], label[order_j[k]]
        if a != b:
            label[label == b] = a
            total += w_sorted[k]
            need -= 1
    return total if need == 0 else None


def best_fair_tree(w: np.ndarray, I: np.ndarray, J: np.ndarray, d: int, roles: Roles,
                   max_expansions: int = 2_000_000) -> tuple[list[tuple[int, int]], int]:
    """Minimum-weight fair spanning tree (Algorithm 1's uniform-cost search, made exact and fast): A* over fair
    forests whose edges are added in increasing position of the weight-sorted pair list (every forest is
    generated once; fairness is inherited by sub-forests, so this loses no fair tree). The heuristic is the
    unconstrained cheapest completion, a lower bound, so the first spanning tree popped is optimal."""
    order = np.argsort(w, kind="stable")
    oi, oj, ws = I[order], J[order], w[order]
    start = np.arange(d)
    h0 = _completion(start, oi, oj, ws, 0, d, 0)
    if h0 is None:
        raise DataError("prefair_optimal: the attribute pairs do not span all attributes")
    heap = [(h0, 0, 0.0, -1, ())]
    pushed, expansions = 1, 0
    while heap:
        f, _, g, last, forest = heapq.heappop(heap)
        if len(forest) == d - 1:
            return [(int(oi[k]), int(oj[k])) for k in forest], expansions
        expansions += 1
        if expansions > max_expansions:
            raise DataError(f"prefair_optimal: search stopped after max_expansions={max_expansions} expansions")
        label = np.arange(d)
        for k in forest:
            a, b = label[oi[k]], label[oj[k]]
            label[label == b] = a
        for k in range(last + 1, len(ws)):
            i, j = int(oi[k]), int(oj[k])
            if label[i] == label[j]:
                continue
            child = forest + (k,)
            if not is_fair([(int(oi[c]), int(oj[c])) for c in child], d, roles):
                continue
            child_label = label.copy()
            child_label[child_label == label[j]] = label[i]
            h = _completion(child_label, oi, oj, ws, k + 1, d, len(child))
            if h is None:
                continue
            pushed += 1
            heapq.heappush(heap, (g + ws[k] + h, pushed, g + ws[k], k, child))
    raise DataError("prefair_optimal: no fair spanning tree exists for these roles")


def forest_shape(edges, d: int) -> tuple[str, ...]:
    """The unlabelled isomorphism class of a forest on d nodes (isolated nodes included): the sorted canonical
    codes of its components, each the AHU code of the tree rooted at its centre (the smaller code of two centres).
    Two forests get the same shape exactly when `networkx.is_isomorphic` holds for them."""
    adj = neighbours(d, edges)

    def code(root: int, parent: int) -> str:
        return "(" + "".join(sorted(code(c, root) for c in adj[root] if c != parent)) + ")"

    seen, shapes = np.zeros(d, bool), []
    for start in range(d):
        if seen[start]:
            continue
        comp = traverse(adj, start, seen, depth_first=True)
        degree = {v: len(adj[v]) for v in comp}
        leaves, left = [v for v in comp if degree[v] <= 1], len(comp)
        while left > 2:  # strip leaves layer by layer down to the centre(s)
            left -= len(leaves)
            nxt = []
            for v in leaves:
                for c in adj[v]:
                    degree[c] -= 1
                    if degree[c] == 1:
                        nxt.append(c)
            leaves = nxt
        shapes.append(min(code(c, -1) for c in leaves))
    return tuple(sorted(shapes))


def ref_code_search(w: np.ndarray, I: np.ndarray, J: np.ndarray, d: int, roles: Roles,
                    max_expansions: int = 2_000_000) -> tuple[list[tuple[int, int]], int]:
    """The reference code's Exponential-PreFair search (prefair.md A7, items 2-4), replayed: a min-heap of forests
    keyed by minus the popped key plus the edge weight (so keys alternate in sign with depth), starting from the
    empty forest; a popped forest with d - 1 edges is returned; the children of a popped forest (one more edge
    joining two components, fair by §1.3) are pushed only when no forest in the heap is isomorphic to it. Ties
    between equal keys go to the earlier push (the reference code breaks them by `id()`, an address)."""
    heap = [(0.0, 0, ())]
    shapes: dict[tuple, int] = {}  # isomorphism classes of the forests in the heap
    pushed = expansions = 0
    while heap:
        key, _, forest = heapq.heappop(heap)
        shape = forest_shape([(int(I[k]), int(J[k])) for k in forest], d) if forest else ()
        if forest:
            shapes[shape] -= 1
        if len(forest) == d - 1:
            return [(int(I[k]), int(J[k])) for k in forest], expansions
        expansions += 1
        if expansions > max_expansions:
            raise DataError(f"prefair_optimal: search stopped after max_expansions={max_expansions} expansions")
        if shapes.get(shape, 0) > 0:  # an isomorphic forest waits in the heap: no children (A7 item 3)
            continue
        label = np.arange(d)
        for k in forest:
            label[label == label[J[k]]] = label[I[k]]
        for k in range(len(w)):
            if label[I[k]] == label[J[k]]:
                continue
            child = forest + (k,)
            edges = [(int(I[c]), int(J[c])) for c in child]
            if not is_fair(edges, d, roles):
                continue
            pushed += 1
            heapq.heappush(heap, (-(key + w[k]), pushed, child))
            child_shape = forest_shape(edges, d)
            shapes[child_shape] = shapes.get(child_shape, 0) + 1
    raise DataError("prefair_optimal: no fair spanning tree exists for these roles")


# ---------------------------------------------------------------------------------------------- pipeline
# MST §3 step 3 (McKenna et al. 2021): a value whose noisy 1-way count is below this many noise standard deviations
# is indistinguishable from an empty one and joins the attribute's rare bucket.
COMPRESSION_SIGMAS = 3


# Counting many pairs (the selection scores every pair): small attributes are counted together. Attributes are packed
# into groups whose joint domain has at most GROUP_CELLS cells, and the pairs between two groups (or within one) come
# out of one joint table of at most JOINT_CELLS cells, summed over the other attributes: KDD's 861 pairs take 286
# bincounts instead of 861, and a table of 2^16 cells is counted about as fast as a small one.
GROUP_CELLS = 256
JOINT_CELLS = 1 << 16


def attribute_groups(domain: list[int], attrs) -> list[list[int]]:
    """`attrs` in increasing domain size (then index), cut into runs whose product of domains is at most
    GROUP_CELLS (an attribute larger than that is a group of its own)."""
    groups: list[list[int]] = []
    cells = GROUP_CELLS + 1
    for a in sorted(attrs, key=lambda a: (domain[a], a)):
        if cells * domain[a] > GROUP_CELLS:
            groups.append([])
            cells = 1
        groups[-1].append(a)
        cells *= domain[a]
    return groups


def count_tables(X: np.ndarray, domain: list[int], cliques):
    """Count tables of the attribute sets `cliques` of the coded table X, one at a time in the order of `cliques`
    (float arrays, the same tables as `metrics.contingency` of the clique's columns, bit for bit).

    X is read column-major (copied only when it is not an intp column-major table already) and each column's
    codes are range-checked once. A 1-way table is one bincount of the column; a pair's table is one bincount of its
    mixed-radix index, built by one multiply-add into a reused buffer (no column copies, no index array per table),
    or, where two groups of small attributes (`attribute_groups`) share two or more of the pairs asked for, the
    group pair's joint table is counted once and summed down to each of its pairs (integer sums: the same counts);
    those tables wait until their turn. Larger cliques go to `metrics.contingency`."""
    X = np.asfortranarray(X, dtype=np.intp)
    cliques = [tuple(int(i) for i in c) for c in cliques]
    for i in sorted({i for c in cliques for i in c}):
        col = X[:, i]
        if len(col) and (col.min() < 0 or col.max() >= domain[i]):
            raise ValueError(f"count_tables: attribute {i} holds codes outside 0..{domain[i] - 1}")
    pairs = [c for c in cliques if len(c) == 2 and c[0] != c[1]]
    groups = attribute_groups(domain, {i for c in pairs for i in c})
    group_of = {a: g for g, members in enumerate(groups) for a in members}
    cells = [math.prod(domain[a] for a in members) for members in groups]

    def key(c):
        g, h = group_of[c[0]], group_of[c[1]]
        return (g, h) if g <= h else (h, g)

    by_key: dict[tuple[int, int], list] = {}
    for c in dict.fromkeys(pairs):
        by_key.setdefault(key(c), []).append(c)
    joint = {k for k, ps in by_key.items()
             if len(ps) >= 2 and (k[0] == k[1] or cells[k[0]] * cells[k[1]] <= JOINT_CELLS)}
    buf = np.empty(len(X), np.intp)
    codes: dict[int, np.ndarray] = {}  # a group's mixed-radix code, its first attribute most significant
    waiting: dict[tuple[int, int], np.ndarray] = {}

    def code(g: int) -> np.ndarray:
        if g not in codes:
            members = groups[g]
            c = X[:, members[0]]
            if len(members) > 1:
                c = c.copy()
                for a in members[1:]:
                    c *= domain[a]
                    c += X[:, a]
            codes[g] = c
        return codes[g]

    for c in cliques:
        shape = tuple(int(domain[i]) for i in c)
        if c in waiting:
            yield waiting.pop(c)
        elif len(c) == 2 and c[0] != c[1] and key(c) in joint:
            g, h = k = key(c)
            joint.discard(k)  # counted once; a pair asked for again is counted on its own
            if g == h:
                axes = groups[g]
                idx = code(g)
            else:
                axes = groups[g] + groups[h]
                idx = np.multiply(code(g), cells[h], out=buf)
                idx += code(h)
            table = np.bincount(idx, minlength=math.prod(domain[a] for a in axes)).reshape([domain[a] for a in axes])
            where = {a: p for p, a in enumerate(axes)}
            for a, b in by_key[k]:
                sub = table.sum(axis=tuple(x for x in range(len(axes)) if x not in (where[a], where[b])))
                waiting[(a, b)] = (sub if where[a] < where[b] else sub.T).astype(float, order="C")
            yield waiting.pop(c)
        elif len(c) == 1:
            yield np.bincount(X[:, c[0]], minlength=shape[0]).astype(float)
        elif len(c) == 2:
            idx = np.multiply(X[:, c[0]], shape[1], out=buf)
            idx += X[:, c[1]]
            yield np.bincount(idx, minlength=math.prod(shape)).astype(float).reshape(shape)
        else:
            yield core_metrics.contingency(X[:, list(c)], shape)


def histograms(X: np.ndarray, domain: list[int], cliques) -> list[np.ndarray]:
    """The count tables of `count_tables`, as a list."""
    return list(count_tables(X, domain, cliques))


@dataclass
class Compression:
    """Per attribute: kept original values (new codes 0..len-1) and the merged ones (code len(kept))."""

    kept: list[np.ndarray]
    merged: list[np.ndarray]

    def encode(self, X: np.ndarray, domain: list[int]) -> tuple[np.ndarray, list[int]]:
        out = np.empty(X.shape, np.intp, order="F")  # column-major, as `count_tables` reads it
        sizes = []
        for i, (kept, merged) in enumerate(zip(self.kept, self.merged, strict=True)):
            lut = np.full(domain[i], len(kept), dtype=np.int64)
            lut[kept] = np.arange(len(kept))
            out[:, i] = lut[X[:, i]]
            sizes.append(len(kept) + (1 if len(merged) else 0))
        return out, sizes

    def decode(self, codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Original int64 codes (column-major) of the compressed `codes`; a rare bucket's rows draw their value
        uniformly from its merged values."""
        out = np.empty(codes.shape, np.int64, order="F")
        for i, (kept, merged) in enumerate(zip(self.kept, self.merged, strict=True)):
            c = codes[:, i]
            out[:, i] = np.append(kept, 0)[c]  # code len(kept), the rare bucket: 0 until drawn below
            if len(merged):
                rare = np.flatnonzero(c >= len(kept))
                out[rare, i] = merged[rng.integers(len(merged), size=rare.size)]
        return out


def compress(one_way: list[np.ndarray], threshold: float, var: float,
             enabled: bool) -> tuple[Compression, list[Measurement]]:
    """§3 step 3: keep values with noisy count >= threshold; the rest become one bucket whose measurement is the sum
    of their noisy counts (variance m var for m merged values, the Q' = 1/sqrt(m) rewrite)."""
    kept, merged, meas = [], [], []
    for i, y in enumerate(one_way):
        keep = y >= threshold if enabled else np.ones(y.size, bool)
        k_idx, m_idx = np.flatnonzero(keep), np.flatnonzero(~keep)
        kept.append(k_idx)
        merged.append(m_idx)
        yy, vv = y[k_idx], np.full(k_idx.size, var)
        if m_idx.size:
            yy = np.append(yy, y[m_idx].sum())
            vv = np.append(vv, m_idx.size * var)
        meas.append(Measurement((i,), yy, vv, y.size * var))
    return Compression(kept, merged), meas


# ---------------------------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class MSTConfig(ReleaseEvaluation):
    """`mst` (defaults: configs/algo/mst.yaml). `rows: n_original` releases the exact row count outside the
    ledger, so such a run claims `heuristic` (A11)."""

    conversion: Literal["cks20", "rdp_classic"]
    compress: bool
    estimator: Literal["tree", "pgm"]
    rows: Literal["nhat", "n_original"]


@dataclass(frozen=True)
class FairReleaseConfig(MSTConfig):
    """The fair generators: `admissible` replaces the card's admissible set (A10)."""

    admissible: list[str] | None


@dataclass(frozen=True)
class PreFairGreedyConfig(FairReleaseConfig):
    """`prefair_greedy` / `pfdr`: the reference code's candidate filter can be replayed (A8)."""

    ref_code_candidate_filter: bool


@dataclass(frozen=True)
class PreFairOptimalConfig(FairReleaseConfig):
    """`prefair_optimal`: the exact search of Algorithm 1, or the reference code's (`ref_code`, A1 + A7), bounded by
    `max_expansions`."""

    search_variant: Literal["exact", "ref_code"]
    max_expansions: int = field(metadata=bounds(ge=1))


# ---------------------------------------------------------------------------------------------- plugins
class MarginalTreeRelease(Plugin):
    """The shared pipeline; subclasses define `select` (and whether the tree must be fair). Evaluated by
    `evaluate.generator` (release metrics, downstream classifiers from `downstream.py`)."""

    kind = "generator"
    needs = ("discrete", "roles", "sensitive", "binary_label")  # the downstream metrics read y and s
    mechanisms = ("gaussian", "exponential")
    needs_delta = True
    default_delta = DEFAULT_DELTA
    accountant = "zcdp"
    guarantee = "zCDP"
    guarantee_note = ("algo.rows=n_original: heuristic (the exact row count is released outside the ledger); "
                      "budget.accountant=rdp: the same zCDP releases, sized to the RDP conversion")
    fair = True
    Config = MSTConfig

    def select(self, q, I, J, d, roles, rho_sel, rng, ledger) -> list[tuple[int, int]]:
        raise NotImplementedError

    def claims(self) -> str:
        """`rows: n_original` releases len(data) exactly, outside the ledger: the zCDP proof then holds only where
        n is public (replace-one neighbours), so the run claims `heuristic`."""
        return "heuristic" if self.cfg.rows == "n_original" else super().claims()

    def allows_unfair_tree(self) -> bool:
        return not self.fair

    # -- fit ----------------------------------------------------------------------------------------------
    def fit(self, data, budget, ledger, rng, device="cpu"):
        t0 = time.perf_counter()
        if data.frame is None or not data.domain:
            raise ConfigError(f"algo={self.name} needs the card's `discrete:` view (one entry per attribute with "
                              f"its levels or bins): add it to configs/data/{data.name}.yaml")
        self.columns = list(data.frame.columns)
        self.domain = [int(data.domain[c]) for c in self.columns]
        d = len(self.columns)
        if d < 2:
            raise DataError(f"algo={self.name} needs at least two attributes")
        admissible = self.cfg.admissible if isinstance(self.cfg, FairReleaseConfig) else None
        self.roles = Roles.from_names(self.columns, data.roles, admissible, data.name)
        self.n_original = len(data)
        X = data.frame.to_numpy(np.int64)

        # rho is calibrated with the accountant the run uses: its own conversion under zcdp, the largest rho whose
        # RDP curve fits the budget under budget.accountant=rdp (issue: calibrate and charge alike)
        self.rho = accountants.zcdp_rho(budget.eps, budget.delta, self.cfg.conversion) if ledger.accountant == "zcdp" \
            else ledger.zcdp_left()
        sigma = accountants.zcdp_sigma(self.rho, 3)  # rho/3 per release at sensitivity 1; 0 at eps = inf
        # The estimator uses the measurements' variances only through their ratios, so the noise-free limit keeps
        # the ratios of sigma = 1.
        unit = sigma or 1.0
        s1, s2 = sigma * math.sqrt(d), sigma * math.sqrt(d - 1)

        counts = histograms(X, self.domain, [(i,) for i in range(d)])
        noisy = gaussian_zcdp(np.concatenate(counts), math.sqrt(d), s1, rng, ledger,
                              note=f"1-way marginals of {d} attributes (rho/3)")
        one_way = np.split(noisy, np.cumsum(self.domain)[:-1])
        self.compression, meas = compress(one_way, COMPRESSION_SIGMAS * s1, (unit * math.sqrt(d)) ** 2,
                                          self.cfg.compress)
        Xc, self.cdomain = self.compression.encode(X, self.domain)

        I, J = pairs_of(d)
        q = self.scores(Xc, meas, I, J)
        edges = self.select(q, I, J, d, self.roles, self.rho / 3, rng, ledger)
        self.fair_tree = is_fair(edges, d, self.roles)
        if not self.fair_tree and not self.allows_unfair_tree():
            raise AssertionError(f"{self.name} selected an unfair tree {edges}")
        self.excluded = sum(not self.roles.allowed(i, j) for i, j in zip(I.tolist(), J.tolist(), strict=True))
        if not self.fair and self.fair_tree:
            self.warn(f"mst's tree is already fair for the roles of data={data.name} (tree_fair = 1): this release "
                      f"meets the fairness condition without a repair")

        tables = histograms(Xc, self.cdomain, edges)
        noisy2 = gaussian_zcdp(np.concatenate([t.ravel() for t in tables]), math.sqrt(d - 1), s2, rng, ledger,
                               note=f"2-way marginals of the {d - 1} tree edges (rho/3)")
        sizes = np.cumsum([t.size for t in tables])[:-1]
        var2 = (unit * math.sqrt(d - 1)) ** 2
        for (i, j), t, y in zip(edges, tables, np.split(noisy2, sizes), strict=True):
            meas.append(Measurement((i, j), y.reshape(t.shape), np.full(t.shape, var2), t.size * var2))
        self.model: TreeModel = self.estimate(edges, meas)
        self.edges = edges
        self.fit_seconds = time.perf_counter() - t0
        return self

    def estimate(self, edges, meas) -> TreeModel:
        """The tree's marginals from the noisy measurements: the spec's tree fallback (`estimator: tree`) or
        Private-PGM's mirror descent (`estimator: pgm`, the paper's; the optional `pgm` extra)."""
        if self.cfg.estimator == "tree":
            return fit_tree(self.cdomain, edges, meas)
        try:
            return fit_pgm(self.cdomain, edges, meas)
        except ImportError as err:
            raise ConfigError(f"algo.estimator=pgm needs Private-PGM (mbi 2.x, `pip install privfair[pgm]`), which "
                              f"does not import here ({err}); allowed without it: tree") from None

    def scores(self, Xc, meas, I, J) -> np.ndarray:
        """q_ij = |M_ij(D') - Nhat phat_i phat_j|_1 with phat from the 1-way measurements (sensitivity 1)."""
        total1 = float(max(1.0, np.sum([m.y.sum() / m.total_var for m in meas])
                           / np.sum([1 / m.total_var for m in meas])))
        phat = [project_simplex(m.y, total1, w=1 / m.var) / total1 for m in meas]
        pairs = list(zip(I.tolist(), J.tolist(), strict=True))
        exact = count_tables(Xc, self.cdomain, pairs)  # one table at a time: KDD at eps = inf has 5e8 cells

        def l1(M: np.ndarray, i: int, j: int) -> float:  # |M - total1 phat_i phat_j|_1 in one scratch table
            e = np.outer(phat[i], phat[j])
            e *= total1
            np.subtract(M, e, out=e)
            return np.abs(e, out=e).sum()

        return np.array([l1(M, i, j) for (i, j), M in zip(pairs, exact, strict=True)])

    # -- release ------------------------------------------------------------------------------------------
    def n_rows(self) -> int:
        """Rows released: int(Nhat) (private), or len(data) with `rows: n_original` (A11)."""
        return int(self.model.total) if self.cfg.rows == "nhat" else self.n_original

    def sample(self, n, rng) -> pd.DataFrame:
        codes = self.compression.decode(self.model.sample_columns(int(n), rng).T, rng)
        return pd.DataFrame(codes, columns=self.columns, copy=False)  # a fresh table: no copy of its 100 MB

    def fairness_roles(self) -> dict[str, list[str]]:
        """The roles this release used, as attribute names in column order (for the downstream gaps)."""
        return {k: [self.columns[i] for i in sorted(getattr(self.roles, k))]
                for k in ("protected", "admissible", "outcome")}

    def extra_metrics(self) -> dict[str, float]:
        excluded = {"pairs_excluded": float(self.excluded)} if self.fair else {}  # candidates the roles rule out
        return {"rho": self.rho, "tree_fair": float(self.fair_tree)} | excluded

    def artifacts(self, run_dir) -> None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        tree = {"edges": [[self.columns[i], self.columns[j]] for i, j in self.edges], "fair": self.fair_tree,
                "roles": self.fairness_roles()}
        (run_dir / "tree.json").write_text(json.dumps(tree, indent=2) + "\n")


@register
class MST(MarginalTreeRelease):
    """`mst`: the baseline, private Kruskal over all pairs (fairness-unaware)."""

    name = "mst"
    fair = False

    def select(self, q, I, J, d, roles, rho_sel, rng, ledger):
        return private_kruskal(q, I, J, d, rho_sel, rng, ledger, self.name)


@register
class PreFairGreedy(MarginalTreeRelease):
    """`prefair_greedy`: Greedy-PreFair (Algorithm 2), private Kruskal over the fair candidate pairs."""

    name = "prefair_greedy"
    Config = PreFairGreedyConfig

    def allows_unfair_tree(self) -> bool:
        return self.cfg.ref_code_candidate_filter  # A8: the replayed bug can select an unfair tree

    def select(self, q, I, J, d, roles, rho_sel, rng, ledger):
        pairs = list(zip(I.tolist(), J.tolist(), strict=True))
        if self.cfg.ref_code_candidate_filter:
            allowed = set(ref_code_filter(pairs, roles))
        else:
            allowed = {p for p in pairs if roles.allowed(*p)}
        keep = np.array([p in allowed for p in pairs])
        return private_kruskal(q[keep], I[keep], J[keep], d, rho_sel, rng, ledger, self.name)


@register
class PreFairDataRelease(PreFairGreedy):
    """`pfdr`: private fair data release, the headline configuration of Greedy-PreFair."""

    name = "pfdr"


@register
class PreFairOptimal(MarginalTreeRelease):
    """`prefair_optimal`: Exponential-PreFair (Algorithm 1): Gaussian-noised weights of all pairs, then the
    best fair spanning tree for those weights."""

    name = "prefair_optimal"
    guarantee_note = ("algo.rows=n_original or algo.search_variant=ref_code (the reference code's selection noise, far "
                      "below what it pays for): heuristic; budget.accountant=rdp: sized to the RDP conversion")
    Config = PreFairOptimalConfig

    def claims(self) -> str:
        """`search_variant: ref_code` selects with the reference code's noise, sqrt(rho_sel / (2 r)) (A1), far
        below what rho_sel pays for: not private, so such a run claims `heuristic`."""
        return "heuristic" if self.cfg.search_variant == "ref_code" else super().claims()

    def select(self, q, I, J, d, roles, rho_sel, rng, ledger):
        r = q.size
        if self.cfg.search_variant == "ref_code":  # A1 + A7: the reference code's weights and search, not private
            sigma_ref = math.sqrt(rho_sel / (2 * r)) if math.isfinite(rho_sel) else 0.0
            self.warn(f"search_variant=ref_code: the selection's noise is the reference code's sqrt(rho_sel/(2r)) = "
                      f"{sigma_ref:.3g} (A1), outside the ledger: the release is not differentially private")
            w = np.maximum(noise_source(rng).add_gaussian(q, sigma_ref), 0.0)
            edges, self.expansions = ref_code_search(w, I, J, d, roles, self.cfg.max_expansions)
            return edges
        sigma_q = accountants.zcdp_sigma(rho_sel, r)  # sensitivity sqrt(r)
        qt = gaussian_zcdp(q, math.sqrt(r), sigma_q, rng, ledger, note=f"noisy weights of {r} pairs (rho/3)")
        edges, self.expansions = best_fair_tree(qt.max() - qt, I, J, d, roles, self.cfg.max_expansions)
        return edges

    def extra_metrics(self):
        return super().extra_metrics() | {"search_expansions": float(self.expansions)}
