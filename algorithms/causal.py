"""Private causal discovery (Xu thesis ch. 4; spec privpc.md): `pc`, `lapmech`, `privpc`, `privpc_star`.

One PC core: `skeleton` (the level loop of Algorithm 2: orders 0, 1, ... until no node has enough neighbours)
driven by a selection rule that decides, level by level, which edges to delete, and `orient` (unshielded
colliders from the separating sets, then Meek rules R1-R3, giving a CPDAG). The conditional-independence tests
live in `citests.py` behind one batched interface. The four learners differ only in their test or their rule:

- `pc`: rule `PCStable` (Colombo & Maathuis; privpc.md §1.3: adjacency sets frozen per level) with G^2 on the
  data (categorical) or Fisher z on the sample correlation (numerical). No privacy.
- `lapmech` (§4): Laplace(1/eps) on every cell of the full contingency table, then `PCStable` with G^2 on its
  clipped marginals. eps-DP (one release, sensitivity 1 under add/remove-one).
- `privpc` (§3, Algorithms 3-4): rule `PrivateSelection`: per node and order, the number of neighbours to cut
  (exponential mechanism on q2) and which ones (beta draws of the exponential mechanism on q1) are chosen from
  distance scores; every draw is charged to the run's ledger, and a round runs only while the ledger has eps_r
  left. Guarantee `heuristic` (see below).
- `privpc_star` (§5): Laplace noise on the lower triangle of the covariance matrix with the thesis' sensitivity
  p(p+1)/(2(n-1)) (Eq. 4.5), then `PCStable` with Fisher z on the noisy correlation. Guarantee `heuristic`.

Evaluation is the runner's graph evaluator (`privfair_cli/evaluate.py`, metrics in `metrics.graph_recovery`):
against the generating graph, or, for data without one (Adult), against the learner's non-private reference
(`reference_graph`: PC with the same test on the same data, §4.6.3), cached on disk.

Guarantees (what `claims()` returns, and why):
- `lapmech`: eps-DP (the number of records n, used by the small-sample rule, is treated as public);
  heuristic with `noise_cells: occupied`, a diagnostic that adds the noise to the non-empty cells only: the set of
  empty cells is then released exactly, so a record's presence shows. It asks whether the published LapMech
  numbers, far better than a full-table release allows, came from a table with about as many noisy cells as
  records (docs/families/pc.md); the run warns and its ledger entry says so.
- `privpc`: heuristic. Corollaries 1-2 give q1, q2 sensitivity 1 for the exact distance score; the score here is
  a greedy search (P3), an upper bound of the exact minimum, whose sensitivity is not proven (spec §3.4).
- `privpc_star`: heuristic. The thesis' sensitivity assumes ||x||^2 <= p per record (P14) and, as the spec notes
  (§5.7), drops the change of the mean: for rows that satisfy the bound it is too small by a factor of about 4
  (n equal rows x = 1 and one added row -1 move the covariance's lower triangle by 2p(p+1)/(n+1) in L1; a test
  checks this). `row_clip: true` (default) enforces the norm bound; `row_clip: false` (the thesis' raw data,
  used by the Table 4.8-4.11 presets) does not, and says so in the run's warnings and its ledger note.
- `pc`: none (non-private).

Warnings (`Plugin.warn`, written to the result and printed by `privfair run`): `pc` on data without a generating
graph (its reference is itself, so its edge metrics are 1 by construction); `privpc_star` on categorical data (the
Fisher z test reads the category codes as numbers) or without row clipping; `privpc` whose fixed per-round budget
ran out before the last order (the remaining nodes keep their edges).

Deviations from the thesis, all chosen by the spec (privpc.md §0, §8):
- PrivPC's sign convention is the corrected one (§3.3): positive distance = independent = deletion candidate;
  `sign_convention: thesis` reproduces Eq. 4.1/4.2 as printed (it selects the dependent neighbours).
- Distance scores use the k* - 1 offset and a cap d_max (P3), found by a greedy search.
- PrivPC's budget schedule (P5) is not in the thesis: eps_r = eps / (p (L + 1)), eps1 = eps2 = eps_r / 2,
  L = `max_order` = 2 (the Adult preset sets L = p - 2, no cap); when beta_hat = 0 the unused eps1 is still
  charged. `round_budget: fixed:<eps_r>` larger than eps is refused (no round could run).
- PC is PC-stable (pcalg's default, P10); orientation uses sepsets (P8) and the standard Meek R3 (P9); colliders
  never re-orient an already oriented edge (conflicts: the first orientation is kept).
- G^2 keeps pcalg's small-sample rule (p-value 1 when n < 10 df); LapMech clips noisy marginal cells at 0 and
  uses the public n (P16). LapMech refuses full tables above `max_cells` (2^29 cells).
- PrivPC* runs on the raw covariance (no standardisation, §5 step 1); `row_clip` rescales rows to norm <= sqrt(p)
  without standardising the columns first (§5 step 6 does, with means and scales "treated as public": here they
  would be read off the private data).
- On categorical data PrivPC* (Fisher z) reads the category codes as numbers (not in the thesis, which runs it on
  Gaussian data only).
- CI tests are counted once per distinct test computed (pcalg repeats order-0 tests of dependent pairs).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import combinations
from math import comb
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from scipy.special import comb as ncomb

from privfair_cli.errors import ConfigError, DataError
from privfair_cli.metrics import contingency
from privfair_cli.privacy.mechanisms import exponential, laplace
from privfair_cli.registry import Plugin, option, register
from privfair_cli.typed import bounds

from .citests import FisherZ, GSquare, NoisyTableGSquare, distance_scores

WAVE_TESTS = 256  # tests per batch in the skeleton search (speculative beyond an edge's first independence)
BUDGET_SLACK = 1e-9  # relative float tolerance when checking that a PrivPC round still fits the ledger's budget


# ---------------------------------------------------------------------------------------------- subsets
@lru_cache(maxsize=256)
def subsets(m: int, r: int) -> np.ndarray:
    """All r-subsets of range(m) in lexicographic order, shape (C(m, r), r)."""
    flat = np.fromiter((v for c in combinations(range(m), r) for v in c), dtype=np.int64, count=comb(m, r) * r)
    return flat.reshape(comb(m, r), r)


def conditioning_sets(adj: np.ndarray, x: np.ndarray, y: np.ndarray, k: np.ndarray, r: int) -> np.ndarray:
    """The k-th (lexicographic) r-subset of adj(x) minus {y}, for each task; shape (T, r)."""
    mask = adj[x].copy()
    mask[np.arange(len(x)), y] = False
    m = mask.sum(1)
    nbrs = np.argsort(~mask, axis=1, kind="stable")  # neighbours first, ascending
    S = np.empty((len(x), r), dtype=np.int64)
    for mv in np.unique(m):
        sel = np.flatnonzero(m == mv)
        S[sel] = np.take_along_axis(nbrs[sel], subsets(int(mv), r)[k[sel]], axis=1)
    return S


# ---------------------------------------------------------------------------------------------- PC core
def skeleton(test, tau: float, max_order: int | None = None, rule=None):
    """The level loop of PC (Algorithm 2, privpc.md §1.3): start from the complete graph; for ord = 0, 1, ...
    (up to `max_order`) while some node has more than ord neighbours, let the selection `rule` (default
    `PCStable(test, tau)`) name the edges to delete at this level, each with its separating set. Deletions
    are applied as the rule yields them, so a rule that reads `adj` between yields sees them (Algorithm 3); a
    rule can end the search early (`rule.exhausted`, e.g. its budget is spent).
    Returns (adjacency, sepset, stats)."""
    rule = PCStable(test, tau) if rule is None else rule
    p = test.n_vars
    adj = ~np.eye(p, dtype=bool)
    sepset: dict[tuple[int, int], tuple[int, ...]] = {}
    order = 0
    while (max_order is None or order <= max_order) and (adj.sum(1) > order).any():
        for i, j, S in rule.level(adj, order):
            adj[i, j] = adj[j, i] = False
            sepset[(i, j)] = sepset[(j, i)] = S
        if rule.exhausted:
            break
        order += 1
    return adj, sepset, dict(rule.stats) | {"max_order_reached": order - 1}


class PCStable:
    """PC-stable's selection rule. For every edge a - b (a < b) of the level's frozen graph, the subsets of
    adj(a) \\ {b} and then of adj(b) \\ {a} are tested in lexicographic order until one gives p-value > tau
    (pcalg's order: the smaller index's side first); that edge goes, with that subset as its separating set.
    Tests run in vectorised waves over all pending edges."""

    exhausted = False

    def __init__(self, test, tau: float, wave: int = WAVE_TESTS):
        self.test, self.tau, self.wave = test, tau, wave
        self.stats = {"ci_tests": 0}

    def level(self, adj: np.ndarray, order: int):
        frozen = adj.copy()
        deg = frozen.sum(1)
        a, b = np.nonzero(np.triu(frozen, 1))
        ma, mb = deg[a] - 1, deg[b] - 1
        La = np.where(ma >= order, ncomb(ma, order, exact=False), 0).astype(np.int64)
        Lb = np.where((mb >= order) & (order > 0), ncomb(mb, order, exact=False), 0).astype(np.int64)
        L = La + Lb
        pos = np.zeros(len(a), dtype=np.int64)
        pending = np.flatnonzero(L > 0)
        while len(pending):
            cnt = np.minimum(max(1, self.wave // len(pending)), L[pending] - pos[pending])
            starts = np.concatenate([[0], np.cumsum(cnt)[:-1]])
            e = np.repeat(pending, cnt)
            k = pos[e] + np.arange(cnt.sum()) - np.repeat(starts, cnt)
            side_b = k >= La[e]
            x, y = np.where(side_b, b[e], a[e]), np.where(side_b, a[e], b[e])
            S = conditioning_sets(frozen, x, y, np.where(side_b, k - La[e], k), order)
            indep = self.test.pvalues(x, y, S) > self.tau
            first = np.minimum.reduceat(np.where(indep, np.arange(len(e)), len(e)), starts)
            cut = first < len(e)
            self.stats["ci_tests"] += int(np.where(cut, first - starts + 1, cnt).sum())
            for t in first[cut]:
                yield int(x[t]), int(y[t]), tuple(int(v) for v in S[t])
            pos[pending] += cnt
            pending = pending[~cut & (pos[pending] < L[pending])]


class PrivateSelection:
    """PrivPC's selection rule (Algorithms 3-4, privpc.md §3.2-3.3). At each level, nodes are visited in
    ascending order with their current neighbours (deletions are immediate); a node with more than ord
    neighbours gets one round: `find_priv_ind` chooses privately which neighbours to cut, at a cost of eps_r
    charged to the ledger. A round runs only while the ledger has eps_r left (Theorem 5); otherwise the search
    ends (`exhausted`)."""

    def __init__(self, test, tau: float, eps_r: float, eps1_frac: float, sign: float, d_max: int, rng, ledger):
        self.test, self.tau, self.rng, self.ledger = test, tau, rng, ledger
        self.eps_r, self.eps1, self.eps2 = eps_r, eps1_frac * eps_r, (1 - eps1_frac) * eps_r  # inf at eps = inf
        self.sign, self.d_max = sign, d_max
        self.exhausted = False
        self.stats = {"ci_tests": 0, "privpc_rounds": 0}

    def affordable(self) -> bool:
        return self.ledger.spent()[0] + self.eps_r <= self.ledger.budget.eps * (1 + BUDGET_SLACK)

    def level(self, adj: np.ndarray, order: int):
        for i in range(len(adj)):
            Adj = np.flatnonzero(adj[i])
            if len(Adj) < order + 1:
                continue
            if not self.affordable():
                self.exhausted = True
                return
            ind, chosen_sets = self.find_priv_ind(i, Adj, order)
            self.stats["privpc_rounds"] += 1
            for j in ind:
                yield i, j, chosen_sets[j]

    def find_priv_ind(self, i: int, Adj: np.ndarray, order: int):
        """Algorithm 4 (privpc.md §3.3): the neighbours of i to disconnect and every neighbour's sepset S_j."""
        alpha = len(Adj)
        combos = subsets(alpha - 1, order)
        others = np.array([np.delete(Adj, t) for t in range(alpha)])  # (alpha, alpha - 1)
        j_of = np.repeat(np.arange(alpha), len(combos))
        S = others[j_of][np.arange(len(j_of))[:, None], np.tile(combos, (alpha, 1))] if order else \
            np.zeros((alpha, 0), dtype=np.int64)
        pv = self.test.pvalues(np.full(len(j_of), i), Adj[j_of], S).reshape(alpha, -1)
        self.stats["ci_tests"] += alpha * len(combos)
        best = pv.argmax(1)  # S_j = argmax_S pv(j, S), first in lexicographic order
        S_j = S.reshape(alpha, len(combos), order)[np.arange(alpha), best]
        pv_j = pv[np.arange(alpha), best]
        d = self.sign * distance_scores(self.test, np.full(alpha, i), Adj, S_j, self.tau, self.d_max)
        indep = (pv_j > self.tau) if self.sign > 0 else (pv_j <= self.tau)
        srt = np.argsort(-d, kind="stable")
        where = f"node {i} order {order}"
        beta = exponential(q2_scores(d[srt], indep[srt]), 1.0, self.eps2, self.rng, self.ledger,
                           f"privpc beta_hat {where}")
        remaining, ind = list(range(alpha)), []
        if beta == 0:
            self.ledger.spend_pure("exponential", self.eps1, 1.0, f"privpc eps1 unused (beta_hat=0) {where}")
        for _ in range(beta):
            t = exponential(d[remaining], 1.0, self.eps1 / beta, self.rng, self.ledger, f"privpc select {where}")
            ind.append(int(Adj[remaining.pop(t)]))
        return ind, {int(Adj[t]): tuple(int(v) for v in S_j[t]) for t in range(alpha)}


def q2_scores(d: np.ndarray, ind: np.ndarray) -> np.ndarray:
    """Quality of cutting t = 0..alpha neighbours (corrected Eqs. 4.2-4.4) from the distance scores sorted in
    decreasing order `d` and their independence flags `ind`; sensitivity 1."""
    alpha = len(d)
    q = np.empty(alpha + 1)
    q[0] = -d[0] - 1 if ind[0] else -d[0]
    q[alpha] = d[-1] - 1 if not ind[-1] else d[-1]
    lo, hi, ilo, ihi = d[:-1], d[1:], ind[:-1], ind[1:]
    q[1:alpha] = np.where(ilo & ~ihi, np.minimum(lo, -hi) - 1, np.where(ilo & ihi, -hi, lo))
    return q


def orient(adj: np.ndarray, sepset: dict) -> np.ndarray:
    """CPDAG from a skeleton and its separating sets (privpc.md §1.3 steps 3-4): A[i, j] = 1, A[j, i] = 0 for
    i -> j; both 1 for i - j. Data are not touched (post-processing)."""
    p = len(adj)
    A = adj.astype(np.int8).copy()
    for i, j in zip(*np.nonzero(np.triu(~adj, 1)), strict=True):
        for k in np.flatnonzero(adj[i] & adj[j]):
            if k in sepset.get((int(i), int(j)), ()):
                continue
            for u in (i, j):  # u -> k unless u - k is already oriented (first orientation kept)
                if A[u, k] and A[k, u]:
                    A[k, u] = 0
    not_adj = ~adj & ~np.eye(p, dtype=bool)
    while True:
        D = (A == 1) & (A.T == 0)
        U = (A == 1) & (A.T == 1)
        r1 = U & ((D.T.astype(int) @ not_adj.astype(int)) > 0)  # i -> j - k, i !~ k  => j -> k
        r2 = U & ((D.astype(int) @ D.astype(int)) > 0)  # i -> k -> j, i - j  => i -> j
        W = U[:, None, :] & D.T[None, :, :]  # W[i, j, k] = i - k and k -> j
        r3 = U & (np.einsum("ijk,kl,ijl->ij", W.astype(int), not_adj.astype(int), W.astype(int)) > 0)
        new = False
        for rule in (r1, r2, r3):
            rule = rule & ~(rule.T & np.tril(np.ones((p, p), dtype=bool)))  # a pair both ways: keep one
            if rule.any():
                A[rule.T] = 0
                new = True
                break
        if not new:
            return A


# ---------------------------------------------------------------------------------------------- artifacts
def edge_list(A: np.ndarray, names) -> str:
    """CSV `source,target,type` with type `directed` (source -> target) or `undirected`."""
    rows = ["source,target,type"]
    for i, j in zip(*np.nonzero(A), strict=True):
        if A[j, i] and i > j:
            continue
        rows.append(f"{names[i]},{names[j]},{'undirected' if A[j, i] else 'directed'}")
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------------------------------------- data views
def categorical_view(data) -> tuple[np.ndarray, np.ndarray]:
    if data.frame is None or not data.domain:
        raise DataError(f"data={data.name}: a G^2 test needs a categorical dataset (a card with a discrete view); "
                        "on numerical data use algo=pc (Fisher z) or algo=privpc_star")
    cols = list(data.frame.columns)
    return data.frame[cols].to_numpy(np.int64), np.array([data.domain[c] for c in cols])


def numeric_view(data) -> tuple[np.ndarray, bool]:
    """The nodes as numbers, for the Fisher z test: the discrete view's codes where the data have one (the same
    nodes as the G^2 learners and `node_names`), else the features; and whether they are category codes."""
    if data.frame is not None and data.domain:
        return categorical_view(data)[0].astype(float), True
    return np.asarray(data.X, dtype=float), False


def node_names(data) -> list[str]:
    return list(data.frame.columns) if data.frame is not None and data.domain else list(data.feature_names)


def data_test(data, test: str, **options):
    """The non-private CI test `test` (g2 | chi2 | fisher_z) on the data itself; `options` go to `GSquare`."""
    if test == "fisher_z":
        X, _ = numeric_view(data)
        return FisherZ(np.corrcoef(X, rowvar=False), len(X))
    codes, cats = categorical_view(data)
    return GSquare(codes, cats, test, **options)


# ---------------------------------------------------------------------------------------------- configs
@dataclass(frozen=True)
class GraphConfig:
    """Keys every PC learner has (configs/algo/<name>.yaml holds the values)."""

    tau: float = field(metadata=bounds(gt=0, lt=1))
    max_order: int | None = field(metadata=bounds(ge=0))
    draw_max_nodes: int = field(metadata=bounds(ge=0))


@dataclass(frozen=True)
class PCConfig(GraphConfig):
    ci_test: Literal["auto", "g2", "chi2", "fisher_z"]
    n_min_factor: float = field(metadata=bounds(ge=0))
    df: Literal["fixed", "adaptive"]


@dataclass(frozen=True)
class LapMechConfig(GraphConfig):
    ci_test: Literal["g2", "chi2"]
    n_min_factor: float = field(metadata=bounds(ge=0))
    max_cells: int = field(metadata=bounds(gt=0))
    noise_cells: Literal["all", "occupied"]


@dataclass(frozen=True)
class PrivPCConfig(GraphConfig):
    max_order: int = field(metadata=bounds(ge=0))  # L enters the per-round budget eps / (p (L + 1)): no null
    n_min_factor: float = field(metadata=bounds(ge=0))
    eps1_frac: float = field(metadata=bounds(gt=0, lt=1))
    round_budget: str
    d_max: int = field(metadata=bounds(ge=1))
    sign_convention: Literal["corrected", "thesis"]

    def __post_init__(self):
        round_eps(self.round_budget)


def round_eps(round_budget: str) -> float | None:
    """The per-round eps of `round_budget: fixed:<eps_r>`; None for `uniform` (eps / (p (L + 1)), §3.6)."""
    if round_budget == "uniform":
        return None
    text = round_budget.removeprefix("fixed:")
    try:
        value = float(text) if text != round_budget else float("nan")
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ConfigError(f"algo.round_budget={round_budget!r} is not allowed; expected uniform or "
                          "fixed:<per-round eps > 0>")
    return value


@dataclass(frozen=True)
class PrivPCStarConfig(GraphConfig):
    row_clip: bool


# ---------------------------------------------------------------------------------------------- plugins
class PCFamily(Plugin):
    """Shared by the four learners: fit = skeleton phase (`learn`) + orientation; the reference graph for
    data without a generating graph; warnings; artifacts."""

    kind = "graph"
    mechanisms = ()

    def learn(self, data, budget, ledger, rng):
        """(adjacency, sepset, stats) of the skeleton phase: PC-stable on this learner's test."""
        test, stats = self.ci_test(data, budget, ledger, rng)
        adj, sep, found = skeleton(test, self.cfg.tau, self.cfg.max_order)
        return adj, sep, found | stats

    def ci_test(self, data, budget, ledger, rng):
        """(CI test, numbers for the result): the data's own test, or a test on a private release of the data."""
        raise NotImplementedError

    def reference(self) -> dict:
        """The non-private test this learner privatises, as `data_test` arguments, every option spelled out so
        that learners with the same test share one cached reference (§4.6.3: the reference graph for data without
        a generating graph is PC with that test on the same data)."""
        raise NotImplementedError

    def fit(self, data, budget, ledger, rng, device="cpu"):
        t0 = time.perf_counter()
        self.names = node_names(data)
        self.true_dag = data.meta.get("true_adjacency")
        self.adjacency, self.sepset, self.stats = self.learn(data, budget, ledger, rng)
        self.cpdag = orient(self.adjacency, self.sepset)
        self.stats["runtime_seconds"] = time.perf_counter() - t0
        return self

    def reference_settings(self) -> dict:
        """What the reference graph depends on besides the data (the evaluator's cache key)."""
        return {"algorithm": "pc-stable", "tau": self.cfg.tau} | self.reference()

    def reference_graph(self, data) -> np.ndarray:
        """Non-private PC-stable with `reference()`'s test on `data`, no order cap: the skeleton to compare
        with when the data have no generating graph."""
        return skeleton(data_test(data, **self.reference()), self.cfg.tau)[0]

    def extra_metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.stats.items()}

    def artifacts(self, run_dir) -> None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "graph_edges.csv").write_text(edge_list(self.cpdag, self.names))
        truth = self.true_dag if self.true_dag is not None else getattr(self, "reference_adjacency", None)
        if self.true_dag is not None:
            (run_dir / "true_dag_edges.csv").write_text(edge_list(np.asarray(self.true_dag).astype(int), self.names))
        if len(self.names) <= self.cfg.draw_max_nodes:  # drawn into graph.png by the plotting layer (plots.py)
            figure = {"nodes": list(map(str, self.names)), "cpdag": np.asarray(self.cpdag).astype(int).tolist(),
                      "truth": None if truth is None else (np.asarray(truth) != 0).astype(int).tolist(),
                      "truth_kind": "generating DAG" if self.true_dag is not None else "reference skeleton",
                      "edges": int(np.triu(self.adjacency, 1).sum())}
            (run_dir / "graph.json").write_text(json.dumps(figure))


@register
class PC(PCFamily):
    """`pc`: the non-private baseline (Algorithm 2, PC-stable)."""

    name = "pc"
    private = False
    guarantee = "none"
    Config = PCConfig

    @classmethod
    def requirements(cls, cfg=None):
        """G^2 / chi^2 read the discrete view; Fisher z (and `auto`) either view (`numeric_view`), a numeric-only
        card only with a reference graph (a synthetic DAG): a table of pixels or embeddings has no causal graph
        to learn."""
        discrete = option(cfg, "ci_test", "auto") in ("g2", "chi2")
        return ("discrete" if discrete else "discrete|graph_reference",)

    def ci_test(self, data, budget, ledger, rng):
        test = self.cfg.ci_test
        if test == "auto":
            test = "g2" if data.frame is not None and data.domain else "fisher_z"
        self.test_name = test
        if self.true_dag is None:
            self.warn(f"data={data.name} has no generating graph: the reference graph is pc itself on the same data, "
                      "so the edge metrics are 1 by construction (only the graph and its size mean something)")
        return data_test(data, **self.reference()), {}

    def reference(self) -> dict:
        if self.test_name == "fisher_z":
            return {"test": "fisher_z"}
        return {"test": self.test_name, "n_min_factor": self.cfg.n_min_factor, "df": self.cfg.df}

    def reference_graph(self, data) -> np.ndarray:
        """Itself when no order cap binds (an order above p - 2 conditions on more nodes than there are)."""
        uncapped = self.cfg.max_order is None or self.cfg.max_order >= len(self.names) - 2
        return self.adjacency.copy() if uncapped else super().reference_graph(data)


def noisy_contingency_table(codes: np.ndarray, cats, eps: float, rng, ledger, max_cells: int,
                            occupied_only: bool = False) -> np.ndarray:
    """The full contingency table (shape `cats`, float32) plus Lap(1/eps) on every cell, empty ones included.
    The Laplace mechanism (sensitivity 1) is recorded once; its noise is drawn in chunks so that a table of
    2^29 cells never needs a float64 copy. A table above `max_cells` cells is refused before anything is spent.
    `occupied_only` (not DP: which cells are empty is released exactly) noises the non-empty cells only."""
    shape = tuple(int(c) for c in cats)
    cells = int(np.prod(shape, dtype=np.float64))
    if cells > max_cells:
        raise DataError(f"lapmech: the full table of these data has {cells:.3g} cells > algo.max_cells={max_cells}; "
                        "use fewer or coarser variables")
    table = contingency(codes, shape, dtype=np.float32).ravel()
    if occupied_only:
        occupied = np.flatnonzero(table)
        ledger.spend_pure("laplace", eps, 1.0, f"the {occupied.size} non-empty cells of the full contingency table "
                          f"({cells} cells): not DP, the empty cells are released exactly")
        table[occupied] += rng.laplace(0.0, 1.0 / eps, size=occupied.size)
        return table.reshape(shape)
    ledger.spend_pure("laplace", eps, 1.0, f"full contingency table ({cells} cells)")
    chunk = 1 << 24
    for lo in range(0, cells, chunk):
        table[lo:lo + chunk] += rng.laplace(0.0, 1.0 / eps, size=min(chunk, cells - lo))
    return table.reshape(shape)


def noisy_covariance(X: np.ndarray, eps: float, rng, ledger, note: str = "") -> np.ndarray:
    """Sample covariance (ddof 1) plus Laplace noise on its lower triangle, mirrored, with the thesis'
    sensitivity p(p+1)/(2(n-1)) (Eq. 4.5; see the module docstring for why it is too small)."""
    n, p = X.shape
    sigma = np.cov(X, rowvar=False, ddof=1)
    lower = np.tril_indices(p)
    noisy = np.zeros((p, p))
    noisy[lower] = laplace(sigma[lower], p * (p + 1) / (2 * (n - 1)), eps, rng, ledger,
                           "covariance lower triangle" + (f" ({note})" if note else ""))
    return np.tril(noisy) + np.tril(noisy, -1).T


def noisy_correlation(X: np.ndarray, eps: float, rng, ledger, row_clip: bool) -> np.ndarray:
    """PrivPC*'s private correlation (privpc.md §5 steps 1-4): noisy covariance scaled by its noisy variances;
    NaN where a noisy variance is not positive (the Fisher z test reads NaN as independence). `row_clip`
    rescales rows to norm <= sqrt(p) first (independent of the data), the bound the sensitivity assumes."""
    if row_clip:
        X = X / np.maximum(1.0, np.linalg.norm(X, axis=1) / np.sqrt(X.shape[1]))[:, None]
    noisy = noisy_covariance(X, eps, rng, ledger, note="" if row_clip else "rows not clipped: not formally private")
    var = np.diag(noisy)
    with np.errstate(invalid="ignore"):
        rho = noisy / np.sqrt(np.outer(var, var))
    np.fill_diagonal(rho, 1.0)
    return rho


class LaplaceRelease(PCFamily):
    """Learners that release the data's sufficient statistic once with Laplace noise and run PC-stable on the
    release (post-processing): `lapmech` (the full contingency table), `privpc_star` (the covariance)."""

    mechanisms: ClassVar[tuple[str, ...]] = ("laplace",)


@register
class LapMech(LaplaceRelease):
    """`lapmech`: Laplace(1/eps) on every cell of the full contingency table, then PC on its marginals."""

    name = "lapmech"
    guarantee_note = 'algo.noise_cells=occupied: heuristic (noise on the non-empty cells only)'
    # the full table must be small enough to hold: an enumerable card, or one of the thesis' referenced tables
    needs = ("discrete", "enumerable|graph_reference")
    Config = LapMechConfig

    def claims(self) -> str:
        return "heuristic" if self.cfg.noise_cells == "occupied" else super().claims()

    def ci_test(self, data, budget, ledger, rng):
        occupied = self.cfg.noise_cells == "occupied"
        if occupied:
            self.warn("algo.noise_cells=occupied: Laplace noise on the non-empty cells only, so the empty cells are "
                      "released exactly and the run is not differentially private (a diagnostic, privpc.md P13)")
        table = noisy_contingency_table(*categorical_view(data), budget.eps, rng, ledger, self.cfg.max_cells,
                                        occupied)
        return NoisyTableGSquare(table, len(data), self.cfg.ci_test, self.cfg.n_min_factor), {"table_cells": table.size}

    def reference(self) -> dict:
        return {"test": self.cfg.ci_test, "n_min_factor": self.cfg.n_min_factor, "df": "fixed"}


@register
class PrivPCStar(LaplaceRelease):
    """`privpc_star`: Laplace on the covariance (sensitivity p(p+1)/(2(n-1)), Eq. 4.5), then Gaussian PC."""

    name = "privpc_star"
    guarantee_note = ("always heuristic: the sensitivity assumes a row norm of at most p and leaves out the change of "
                      "the mean (P14)")
    guarantee = "heuristic"
    Config = PrivPCStarConfig

    def ci_test(self, data, budget, ledger, rng):
        X, codes = numeric_view(data)
        if codes:
            self.warn(f"privpc_star's Fisher z test reads data={data.name}'s category codes as numbers (linear "
                      "association of the codes; for nominal attributes it depends on the coding)")
        if not self.cfg.row_clip:
            self.warn("algo.row_clip=false: rows are not clipped to the norm bound ||x||^2 <= p that the noise "
                      "scale assumes, so the released covariance has no privacy guarantee")
        rho = noisy_correlation(X, budget.eps, rng, ledger, self.cfg.row_clip)
        return FisherZ(rho, len(X)), {"nan_correlations": int(np.isnan(rho).sum()),
                                      "rows_clipped": int(self.cfg.row_clip)}

    def reference(self) -> dict:
        return {"test": "fisher_z"}


@register
class PrivPC(PCFamily):
    """`privpc`: the PC core with PrivPC's selection rule (Algorithms 3-4), corrected sign convention, the
    spec's budget schedule."""

    name = "privpc"
    guarantee_note = 'always heuristic: the sensitivity of the score used is not proven (spec §3.4)'
    needs = ("discrete",)
    mechanisms = ("exponential",)
    guarantee = "heuristic"
    Config = PrivPCConfig

    def learn(self, data, budget, ledger, rng):
        test = GSquare(*categorical_view(data), "g2", self.cfg.n_min_factor)
        L = self.cfg.max_order
        eps_r = round_eps(self.cfg.round_budget) or budget.eps / (test.n_vars * (L + 1))
        if eps_r > budget.eps * (1 + BUDGET_SLACK):
            raise ConfigError(f"algo.round_budget={self.cfg.round_budget} costs more than eps={budget.eps:g} per "
                              "round: no round could run and the complete graph would be returned; use a "
                              "per-round eps <= eps, or round_budget=uniform")
        rule = PrivateSelection(test, self.cfg.tau, eps_r, self.cfg.eps1_frac,
                                {"corrected": 1.0, "thesis": -1.0}[self.cfg.sign_convention], self.cfg.d_max,
                                rng, ledger)
        adj, sep, stats = skeleton(test, self.cfg.tau, L, rule)
        if rule.exhausted:
            self.warn(f"algo.round_budget={self.cfg.round_budget}: the budget ran out after "
                      f"{rule.stats['privpc_rounds']} rounds, at order {stats['max_order_reached'] + 1}; the nodes "
                      "not reached keep all their edges")
        return adj, sep, stats | {"eps_per_round": eps_r}

    def reference(self) -> dict:
        return {"test": "g2", "n_min_factor": self.cfg.n_min_factor, "df": "fixed"}

