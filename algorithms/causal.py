"""Private causal discovery (Xu thesis ch. 4; spec privpc.md): `pc`, `lapmech`, `privpc`, `privpc_star`.

One PC core: `skeleton` (PC-stable, Colombo & Maathuis; Algorithm 2 with adjacency sets frozen per level,
privpc.md §1.3) and `orient` (unshielded colliders from the separating sets, then Meek rules R1-R3, giving a
CPDAG). The conditional-independence tests live in `citests.py` behind one batched interface; the private
variants plug in as tests or as a selection rule:

- `pc`: G^2 on the data (categorical) or Fisher z on the sample correlation (Gaussian). No privacy.
- `lapmech` (§4): Laplace(1/eps) on every cell of the full contingency table, then `pc` with G^2 on its clipped
  marginals. eps-DP (one release, sensitivity 1 under add/remove-one).
- `privpc` (§3, Algorithms 3-4): per node and order, the number of neighbours to cut (exponential mechanism on
  q2) and which ones (beta draws of the exponential mechanism on q1) are chosen privately from distance scores.
  eps-DP by sequential composition of the rounds (Theorem 5), each round eps_r = eps1 + eps2.
- `privpc_star` (§5): Laplace noise on the lower triangle of the covariance matrix with the thesis' sensitivity
  p(p+1)/(2(n-1)) (Eq. 4.5), then Gaussian `pc` on the noisy correlation. eps-DP only under the proof's
  assumption ||x||^2 <= p per record (see deviations).

Evaluation (§1.5) compares skeletons in two readings, both in every result: `*_textbook` (pcalg
`compareGraphs(est, true)`: tpr = recall, tdr = precision, fpr = false edges / true gaps) and `*_pub` (the
same function with the graphs swapped, which is what the thesis' tables print: tpr_pub = precision,
tdr_pub = recall, fpr_pub = missed true edges / gaps of the estimate). Without a generating graph (Adult), the
reference is the non-private `pc` skeleton of the same data, as in §4.6.3.

Deviations from the thesis, all chosen by the spec (privpc.md §0, §8):
- PrivPC's sign convention is the corrected one (§3.3): positive distance = independent = deletion candidate;
  `sign_convention: thesis` reproduces Eq. 4.1/4.2 as printed (it selects the dependent neighbours).
- Distance scores use the k* - 1 offset and a cap d_max (P3), found by a greedy search: the greedy count is an
  upper bound of the exact minimum, so sensitivity 1 (Corollaries 1-2) is not formally guaranteed for it.
- PrivPC's budget schedule (P5) is not in the thesis: eps_r = eps / (p (L + 1)), eps1 = eps2 = eps_r / 2,
  L = `max_order` = 2 (the Adult preset sets L = p - 2, no cap); when beta_hat = 0 the unused eps1 is still
  charged.
- PC is PC-stable (pcalg's default, P10); orientation uses sepsets (P8) and the standard Meek R3 (P9); colliders
  never re-orient an already oriented edge (conflicts: the first orientation is kept).
- G^2 keeps pcalg's small-sample rule (p-value 1 when n < 10 df); LapMech clips noisy marginal cells at 0 and
  uses the public n (P16). LapMech refuses full tables above `max_cells` (2^29 cells).
- PrivPC*'s privacy proof assumes every record has ||x||^2 <= p (P14), which raw simulated data violate. By
  default (`row_clip: true`) rows are rescaled to norm <= sqrt(p) before the covariance is released, a
  data-independent step that makes the bound, and so the eps-DP claim, hold. `row_clip: false` is the thesis'
  unclipped construction, used by the Table 4.8-4.11 presets to reproduce the printed numbers; those runs are
  not formally private and say so (`formally_private = 0` in their metrics, and in the ledger note).
- CI tests are counted once per distinct test computed (pcalg repeats order-0 tests of dependent pairs).
"""

from __future__ import annotations

import time
from functools import lru_cache
from itertools import combinations
from math import comb
from pathlib import Path

import numpy as np
from scipy.special import comb as ncomb

from privfair_cli import metrics as core_metrics
from privfair_cli import plots
from privfair_cli.errors import ConfigError, DataError
from privfair_cli.privacy.mechanisms import exponential, laplace
from privfair_cli.registry import Plugin, register

from .citests import FisherZ, GSquare, NoisyTableGSquare, distance_scores

WAVE_TESTS = 256  # tests per batch in the skeleton search (speculative beyond an edge's first independence)


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
def skeleton(test, tau: float, max_order: int | None = None, wave: int = WAVE_TESTS):
    """PC-stable skeleton. For every edge a - b (a < b) of the level's frozen graph, the subsets of
    adj(a) \\ {b} and then of adj(b) \\ {a} are tested in lexicographic order until one gives p-value > tau
    (pcalg's order: the smaller index's side first). Tests run in vectorised waves over all pending edges.
    Returns (adjacency, sepset, stats)."""
    p = test.n_vars
    adj = ~np.eye(p, dtype=bool)
    sepset: dict[tuple[int, int], tuple[int, ...]] = {}
    n_tests, order = 0, 0
    while max_order is None or order <= max_order:
        frozen = adj.copy()
        deg = frozen.sum(1)
        a, b = np.nonzero(np.triu(frozen, 1))
        ma, mb = deg[a] - 1, deg[b] - 1
        if not ((ma >= order) | (mb >= order)).any():
            break
        La = np.where(ma >= order, ncomb(ma, order, exact=False), 0).astype(np.int64)
        Lb = np.where((mb >= order) & (order > 0), ncomb(mb, order, exact=False), 0).astype(np.int64)
        L = La + Lb
        pos = np.zeros(len(a), dtype=np.int64)
        pending = np.flatnonzero(L > 0)
        while len(pending):
            cnt = np.minimum(max(1, wave // len(pending)), L[pending] - pos[pending])
            starts = np.concatenate([[0], np.cumsum(cnt)[:-1]])
            e = np.repeat(pending, cnt)
            k = pos[e] + np.arange(cnt.sum()) - np.repeat(starts, cnt)
            side_b = k >= La[e]
            x, y = np.where(side_b, b[e], a[e]), np.where(side_b, a[e], b[e])
            S = conditioning_sets(frozen, x, y, np.where(side_b, k - La[e], k), order)
            indep = test.pvalues(x, y, S) > tau
            first = np.minimum.reduceat(np.where(indep, np.arange(len(e)), len(e)), starts)
            cut = first < len(e)
            n_tests += int(np.where(cut, first - starts + 1, cnt).sum())
            for t in first[cut]:
                i, j = int(x[t]), int(y[t])
                adj[i, j] = adj[j, i] = False
                sepset[(i, j)] = sepset[(j, i)] = tuple(int(v) for v in S[t])
            pos[pending] += cnt
            pending = pending[~cut & (pos[pending] < L[pending])]
        order += 1
    return adj, sepset, {"ci_tests": n_tests, "max_order_reached": order - 1}


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


# ---------------------------------------------------------------------------------------------- metrics
def compare_graphs(est, true) -> tuple[float, float, float]:
    """pcalg `compareGraphs(gl = est, gt = true)` on skeletons: (tpr, fpr, tdr) with its edge-case rules."""
    e, t = _skeleton_edges(est), _skeleton_edges(true)
    n_true, n_est, shared = int(t.sum()), int(e.sum()), int((t & e).sum())
    gaps = len(t) - n_true
    fpr = 1.0 if gaps == 0 else int((e & ~t).sum()) / gaps
    tpr = 0.0 if n_true == 0 else shared / n_true
    tdr = (1.0 if shared == 0 else 0.0) if n_est == 0 else shared / n_est
    return tpr, fpr, tdr


def _skeleton_edges(adj) -> np.ndarray:
    a = np.asarray(adj) != 0
    a = a | a.T
    return a[np.triu_indices_from(a, k=1)]


def skeleton_textbook(est, true) -> dict[str, float]:
    """Thesis definitions (4.6): tpr = recall, fpr = false edges / true gaps, tdr = precision, fdr = 1 - tdr."""
    tpr, fpr, tdr = compare_graphs(est, true)
    return {"tpr_textbook": tpr, "fpr_textbook": fpr, "tdr_textbook": tdr, "fdr_textbook": 1 - tdr}


def skeleton_published(est, true) -> dict[str, float]:
    """The reading the thesis' tables print (privpc.md §0.1): compareGraphs with the graphs swapped, so
    tpr_pub = precision, tdr_pub = recall, fpr_pub = missed true edges / gaps of the estimate."""
    tpr, fpr, tdr = compare_graphs(true, est)
    return {"tpr_pub": tpr, "fpr_pub": fpr, "tdr_pub": tdr, "fdr_pub": 1 - tdr}


def skeleton_metrics(est, true) -> dict[str, float]:
    """The core graph metrics (`edge_tpr`, `edge_fpr`, `edge_tdr`, `edge_fdr`, `shd`: textbook reading, NaN where a
    rate is undefined), both pcalg readings with pcalg's edge-case rules, and edge counts."""
    e, t = _skeleton_edges(est), _skeleton_edges(true)
    counts = {"true_edges": int(t.sum()), "num_edges": int(e.sum()), "shared_edges": int((t & e).sum())}
    return (core_metrics.graph_recovery(true, est) | skeleton_textbook(est, true) | skeleton_published(est, true)
            | counts)


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
        raise DataError(f"data={data.name}: a G^2 test needs a categorical dataset (a card with a discrete view)")
    cols = list(data.frame.columns)
    return data.frame[cols].to_numpy(np.int64), np.array([data.domain[c] for c in cols])


def node_names(data) -> list[str]:
    return list(data.frame.columns) if data.frame is not None else list(data.feature_names)


# ---------------------------------------------------------------------------------------------- plugins
class PCFamily(Plugin):
    """Shared by the four learners: the CI test set-up, the orientation, evaluation and artifacts."""

    kind = "graph"
    mechanisms = ()

    def __init__(self, mechanism=None, **params):
        super().__init__(**params)
        self.tau = float(params.get("tau", 0.01))
        self.max_order = params.get("max_order")
        self.stats: dict[str, float] = {}

    def ci_test_name(self, data) -> str:
        name = self.params.get("ci_test", "auto")
        if name == "auto":
            return "g2" if data.frame is not None and data.domain else "fisher_z"
        if name not in ("g2", "chi2", "fisher_z"):
            raise ConfigError(f"algo.ci_test={name!r} is unknown; allowed: auto, g2, chi2, fisher_z")
        return name

    def data_test(self, data):
        """The non-private test on the data itself (`pc`, and the reference graph when there is no truth)."""
        name = self.ci_test_name(data)
        if name == "fisher_z":
            return FisherZ(np.corrcoef(np.asarray(data.X, float), rowvar=False), len(data))
        codes, cats = categorical_view(data)
        return GSquare(codes, cats, name, float(self.params.get("n_min_factor", 10)), self.params.get("df", "fixed"))

    def learn(self, data, budget, ledger, rng):
        """(adjacency, sepset, stats) of the private or non-private skeleton phase."""
        raise NotImplementedError

    def fit(self, data, budget, ledger, rng, device="cpu"):
        t0 = time.perf_counter()
        self.names = node_names(data)
        self.adjacency, self.sepset, self.stats = self.learn(data, budget, ledger, rng)
        self.cpdag = orient(self.adjacency, self.sepset)
        self.stats["runtime_seconds"] = time.perf_counter() - t0
        self.true_dag = data.meta.get("true_adjacency")
        return self

    def evaluate(self, train, test, rng) -> dict[str, float]:
        reference = train.meta.get("true_adjacency")
        if reference is None:  # no generating graph: the non-private PC skeleton of the same data (§4.6.3)
            reference, _, _ = skeleton(self.data_test(train), self.tau)
            self.reference = reference
        return skeleton_metrics(self.adjacency, reference)

    def extra_metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.stats.items()}

    def artifacts(self, run_dir) -> None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "graph_edges.csv").write_text(edge_list(self.cpdag, self.names))
        truth = self.true_dag if self.true_dag is not None else getattr(self, "reference", None)
        if self.true_dag is not None:
            (run_dir / "true_dag_edges.csv").write_text(edge_list(np.asarray(self.true_dag).astype(int), self.names))
        if len(self.names) <= int(self.params.get("draw_max_nodes", 20)):
            plots.graph(self.cpdag, self.names, run_dir / "graph.png", truth,
                       f"{self.name}: {int(_skeleton_edges(self.cpdag).sum())} edges")


@register
class PC(PCFamily):
    """`pc`: the non-private baseline (Algorithm 2, PC-stable)."""

    name = "pc"
    private = False

    def learn(self, data, budget, ledger, rng):
        return skeleton(self.data_test(data), self.tau, self.max_order)


def noisy_contingency_table(codes: np.ndarray, cats, eps: float, rng, ledger) -> np.ndarray:
    """The full contingency table (shape `cats`, float32) plus Lap(1/eps) on every cell, empty ones included.
    The Laplace mechanism (sensitivity 1) is recorded once; its noise is drawn in chunks so that a table of
    2^29 cells never needs a float64 copy."""
    shape = tuple(int(c) for c in cats)
    cells = int(np.prod(shape))
    table = np.bincount(np.ravel_multi_index(codes.T, shape), minlength=cells).astype(np.float32)
    ledger.spend_pure("laplace", eps, 1.0, f"full contingency table ({cells} cells)")
    chunk = 1 << 24
    for lo in range(0, cells, chunk):
        table[lo:lo + chunk] += rng.laplace(0.0, 1.0 / eps, size=min(chunk, cells - lo))
    return table.reshape(shape)


def noisy_covariance(X: np.ndarray, eps: float, rng, ledger, note: str = "") -> np.ndarray:
    """Sample covariance (ddof 1) plus Laplace noise on its lower triangle, mirrored; sensitivity
    p(p+1)/(2(n-1)) from Eq. 4.5, valid for records with ||x||^2 <= p."""
    n, p = X.shape
    sigma = np.cov(X, rowvar=False, ddof=1)
    lower = np.tril_indices(p)
    noisy = np.zeros((p, p))
    noisy[lower] = laplace(sigma[lower], p * (p + 1) / (2 * (n - 1)), eps, rng, ledger,
                           "covariance lower triangle" + (f" ({note})" if note else ""))
    return np.tril(noisy) + np.tril(noisy, -1).T


def noisy_correlation(X: np.ndarray, eps: float, rng, ledger, row_clip: bool = True) -> np.ndarray:
    """PrivPC*'s private correlation (privpc.md §5 steps 1-4): noisy covariance scaled by its noisy variances;
    NaN where a noisy variance is not positive (the Fisher z test reads NaN as independence). `row_clip`
    rescales rows to norm <= sqrt(p) first (independent of the data), so that the sensitivity holds."""
    if row_clip:
        X = X / np.maximum(1.0, np.linalg.norm(X, axis=1) / np.sqrt(X.shape[1]))[:, None]
    noisy = noisy_covariance(X, eps, rng, ledger, note="" if row_clip else "rows not clipped: not formally private")
    var = np.diag(noisy)
    with np.errstate(invalid="ignore"):
        rho = noisy / np.sqrt(np.outer(var, var))
    np.fill_diagonal(rho, 1.0)
    return rho


@register
class LapMech(PCFamily):
    """`lapmech`: Laplace(1/eps) on every cell of the full contingency table, then PC on its marginals."""

    name = "lapmech"
    mechanisms = ("laplace",)

    def learn(self, data, budget, ledger, rng):
        codes, cats = categorical_view(data)
        cells = int(np.prod(cats, dtype=np.float64))
        max_cells = int(self.params.get("max_cells", 2**29))
        if cells > max_cells:
            raise DataError(f"lapmech: the full table has {cells:.3g} cells > algo.max_cells={max_cells}; "
                            "use fewer/smaller variables (the dataset card's category cap)")
        table = noisy_contingency_table(codes, cats, budget.eps, rng, ledger)
        test = NoisyTableGSquare(table, len(codes),
                                 self.params.get("ci_test_stat", "g2"), float(self.params.get("n_min_factor", 10)))
        adj, sep, stats = skeleton(test, self.tau, self.max_order)
        return adj, sep, stats | {"table_cells": cells}


@register
class PrivPCStar(PCFamily):
    """`privpc_star`: Laplace on the covariance (sensitivity p(p+1)/(2(n-1)), Eq. 4.5), then Gaussian PC."""

    name = "privpc_star"
    mechanisms = ("laplace",)

    def learn(self, data, budget, ledger, rng):
        X = np.asarray(data.X, dtype=float)
        row_clip = bool(self.params.get("row_clip", True))
        rho = noisy_correlation(X, budget.eps, rng, ledger, row_clip)
        adj, sep, stats = skeleton(FisherZ(rho, len(X)), self.tau, self.max_order)
        return adj, sep, stats | {"nan_correlations": int(np.isnan(rho).sum()), "formally_private": int(row_clip)}


@register
class PrivPC(PCFamily):
    """`privpc`: Algorithms 3-4 with the corrected sign convention and the spec's budget schedule."""

    name = "privpc"
    mechanisms = ("exponential",)

    def learn(self, data, budget, ledger, rng):
        codes, cats = categorical_view(data)
        test = GSquare(codes, cats, "g2", float(self.params.get("n_min_factor", 10)))
        p = test.n_vars
        L = int(self.params.get("max_order", 2))
        schedule = str(self.params.get("round_budget", "uniform"))
        eps_r = budget.eps / (p * (L + 1)) if schedule == "uniform" else float(schedule.removeprefix("fixed:"))
        eps1 = float(self.params.get("eps1_frac", 0.5)) * eps_r
        eps2 = eps_r - eps1
        sign = {"corrected": 1.0, "thesis": -1.0}[self.params.get("sign_convention", "corrected")]
        d_max = int(self.params.get("d_max", 1000))
        adj = ~np.eye(p, dtype=bool)
        sepset: dict[tuple[int, int], tuple[int, ...]] = {}
        spent, rounds, n_tests, order = 0.0, 0, 0, 0
        while order <= L and (adj.sum(1) >= order + 1).any():
            for i in range(p):
                Adj = np.flatnonzero(adj[i])
                if len(Adj) < order + 1:
                    continue
                if spent + eps_r > budget.eps * (1 + 1e-9):
                    break
                ind, chosen_sets, tests = self.find_priv_ind(test, i, Adj, order, eps1, eps2, sign, d_max,
                                                             rng, ledger)
                for j in ind:
                    adj[i, j] = adj[j, i] = False
                    sepset[(i, j)] = sepset[(j, i)] = chosen_sets[j]
                spent += eps_r
                rounds += 1
                n_tests += tests
            else:
                order += 1
                continue
            break
        return adj, sepset, {"ci_tests": n_tests, "privpc_rounds": rounds, "max_order_reached": order - 1,
                             "eps_per_round": eps_r}

    def find_priv_ind(self, test, i, Adj, order, eps1, eps2, sign, d_max, rng, ledger):
        """Algorithm 4 (privpc.md §3.3): returns the neighbours to disconnect, their sepsets, #CI tests."""
        alpha = len(Adj)
        combos = subsets(alpha - 1, order)
        others = np.array([np.delete(Adj, t) for t in range(alpha)])  # (alpha, alpha - 1)
        j_of = np.repeat(np.arange(alpha), len(combos))
        S = others[j_of][np.arange(len(j_of))[:, None], np.tile(combos, (alpha, 1))] if order else \
            np.zeros((alpha, 0), dtype=np.int64)
        pv = test.pvalues(np.full(len(j_of), i), Adj[j_of], S).reshape(alpha, -1)
        best = pv.argmax(1)  # S_j = argmax_S pv(j, S), first in lexicographic order
        S_j = S.reshape(alpha, len(combos), order)[np.arange(alpha), best]
        pv_j = pv[np.arange(alpha), best]
        d = sign * distance_scores(test, np.full(alpha, i), Adj, S_j, self.tau, d_max)
        indep = (pv_j > self.tau) if sign > 0 else (pv_j <= self.tau)
        srt = np.argsort(-d, kind="stable")
        beta = exponential(q2_scores(d[srt], indep[srt]), 1.0, eps2, rng, ledger,
                           f"privpc beta_hat node {i} order {order}")
        remaining, ind = list(range(alpha)), []
        if beta == 0:
            ledger.spend_pure("exponential", eps1, 1.0, f"privpc eps1 unused (beta_hat=0) node {i} order {order}")
        for _ in range(beta):
            t = exponential(d[remaining], 1.0, eps1 / beta, rng, ledger, f"privpc select node {i} order {order}")
            ind.append(int(Adj[remaining.pop(t)]))
        sets = {int(Adj[t]): tuple(int(v) for v in S_j[t]) for t in range(alpha)}
        return ind, sets, alpha * len(combos)


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
