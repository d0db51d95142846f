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
- Model fitting uses the spec's tree fallback estimator (§3, "simpler fallback"), not Private-PGM's mirror
  descent: node marginals by inverse-variance combination + simplex projection, edges by IPF. Same
  measurements, consistent marginals, not bit-identical to Private-PGM (A23). Selection's product model is the
  same projection of the 1-way measurements.
- A1: Exponential-PreFair's noise is sigma_q = sqrt(r / (2 rho_sel)) (the proof's, private); the reference
  code's typo is not reproduced. A7: `search_variant: exact` only: A* over fair forests in a canonical edge
  order (each forest generated once), heuristic = weight of the unconstrained minimum completion (admissible),
  so the result is the optimum of Algorithm 1; `max_expansions` bounds the search. The reference code's
  heuristic search is not replicated.
- A4: delta defaults to 1e-9 (the plugins' `default_delta`); `conversion: rdp_classic` uses Thm 4 instead.
- A8: the candidate filter is correct by default; `ref_code_candidate_filter: true` replays the reference
  code's skip-after-remove bug (its trees can be unfair: `tree_fair` is then 0 instead of an error).
  A9: outcome-outcome edges are allowed (the paper's rule).
- A10: Adult's admissible set is the reference code's; `admissible: [...]` overrides the card's roles.
- A11: int(Nhat) rows by default; `rows: n_original` releases len(data) rows (n is then not protected).
- Metrics (§9): TVD over marginals with <= `max_cells` cells; ACD both as Bergsma's corrected Cramér's V
  (`acd`) and the reference code's variant (`acd_ref_code`, A13, as the spec describes it); conditional gaps
  both as the reference code's per-group means (`cdp`, ...) and the seed's weighted form (`cdp_weighted`, A14).
  TVD and ACD compare with the released (training) table; downstream models train on synthetic data and
  are tested on the run's test split; set `data.test_size=0`
  for the paper's protocol (test = the full real data, A15). "Linear regression" predictions are clipped to
  [0, 1] before rounding. The MLP is the reference code's Keras net rebuilt in numpy.
- Compas gaps: the published cells are labelled `sensitive=sex`, but the published MST gaps (DP ~0.25 at every
  eps) match the gaps between Race codes 1 and 0 (African-American vs Caucasian), not Sex (~0.05): the card's
  `roles.audit: [Race]` adds those gaps as `dp_race`, ..., and the Compas comparisons use them, with the Sex
  gaps as extra rows (docs/families/prefair.md, Compas).
"""

from __future__ import annotations

import gzip
import heapq
import json
import math
import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import numpy as np
import pandas as pd

from privfair_cli import metrics as core_metrics
from privfair_cli.algorithms.tree_model import Measurement, TreeModel, fit_tree, project_simplex
from privfair_cli.errors import ConfigError, DataError
from privfair_cli.privacy import accountants
from privfair_cli.privacy.mechanisms import exponential, gaussian_zcdp
from privfair_cli.registry import Plugin, register

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
            raise DataError(f"{where}: roles.outcome is empty; a fair release needs the outcome attribute(s)")
        if not sets["admissible"]:
            raise DataError(
                f"{where}: roles.admissible is empty, so no fair spanning tree can connect the outcome to the "
                "other attributes (PreFair §3 Prop. 5 needs A non-empty); declare admissible attributes")
        if (sets["protected"] & sets["admissible"]) or (sets["protected"] & sets["outcome"]) or (
                sets["admissible"] & sets["outcome"]):
            raise DataError(f"{where}: roles protected / admissible / outcome must be disjoint")
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
    eps_em = math.sqrt(8 * rho_sel / (d - 1))
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


# ---------------------------------------------------------------------------------------------- pipeline
def zcdp_budget(eps: float, delta: float, conversion: str) -> float:
    if conversion == "cks20":
        return accountants.cdp_rho(eps, delta)
    if conversion == "rdp_classic":
        return (math.sqrt(math.log(1 / delta) + eps) - math.sqrt(math.log(1 / delta))) ** 2
    raise ConfigError(f"algo.conversion={conversion!r} is unknown; allowed: cks20, rdp_classic")


def histograms(X: np.ndarray, domain: list[int], cliques) -> list[np.ndarray]:
    out = []
    for c in cliques:
        shape = tuple(domain[i] for i in c)
        idx = np.ravel_multi_index(tuple(X[:, i] for i in c), shape) if len(c) > 1 else X[:, c[0]]
        out.append(np.bincount(idx, minlength=int(np.prod(shape))).reshape(shape).astype(float))
    return out


@dataclass
class Compression:
    """Per attribute: kept original values (new codes 0..len-1) and the merged ones (code len(kept))."""

    kept: list[np.ndarray]
    merged: list[np.ndarray]

    def encode(self, X: np.ndarray, domain: list[int]) -> tuple[np.ndarray, list[int]]:
        out = np.empty_like(X)
        sizes = []
        for i, (kept, merged) in enumerate(zip(self.kept, self.merged, strict=True)):
            lut = np.full(domain[i], len(kept), dtype=np.int64)
            lut[kept] = np.arange(len(kept))
            out[:, i] = lut[X[:, i]]
            sizes.append(len(kept) + (1 if len(merged) else 0))
        return out, sizes

    def decode(self, codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        out = np.empty_like(codes)
        for i, (kept, merged) in enumerate(zip(self.kept, self.merged, strict=True)):
            c = codes[:, i]
            rare = c >= len(kept)
            out[~rare, i] = kept[c[~rare]]
            out[rare, i] = merged[rng.integers(len(merged), size=int(rare.sum()))] if len(merged) else 0
        return out


def compress(one_way: list[np.ndarray], s1: float, enabled: bool) -> tuple[Compression, list[Measurement]]:
    """§3 step 3: keep values with noisy count >= 3 s1; the rest become one bucket whose measurement is the sum
    of their noisy counts (variance m s1^2, the Q' = 1/sqrt(m) rewrite)."""
    kept, merged, meas = [], [], []
    for i, y in enumerate(one_way):
        keep = y >= 3 * s1 if enabled else np.ones(y.size, bool)
        k_idx, m_idx = np.flatnonzero(keep), np.flatnonzero(~keep)
        kept.append(k_idx)
        merged.append(m_idx)
        yy, vv = y[k_idx], np.full(k_idx.size, s1**2)
        if m_idx.size:
            yy = np.append(yy, y[m_idx].sum())
            vv = np.append(vv, m_idx.size * s1**2)
        meas.append(Measurement((i,), yy, vv, y.size * s1**2))
    return Compression(kept, merged), meas


class MarginalTreeRelease(Plugin):
    """The shared pipeline; subclasses define `select` (and whether the tree must be fair)."""

    kind = "generator"
    mechanisms = ("gaussian", "exponential")
    needs_delta = True
    default_delta = DEFAULT_DELTA
    accountant = "zcdp"
    fair = True

    def select(self, q, I, J, d, roles, rho_sel, rng, ledger) -> list[tuple[int, int]]:
        raise NotImplementedError

    # -- fit ----------------------------------------------------------------------------------------------
    def fit(self, data, budget, ledger, rng, device="cpu"):
        t0 = time.perf_counter()
        if data.frame is None or not data.domain:
            raise DataError(f"algo={self.name} needs the dataset's discrete view: add a `discrete:` section to "
                            f"the card of data={data.name}")
        self.columns = list(data.frame.columns)
        self.domain = [int(data.domain[c]) for c in self.columns]
        d = len(self.columns)
        if d < 2:
            raise DataError(f"algo={self.name} needs at least two attributes")
        self.roles = Roles.from_names(self.columns, data.roles, self.params.get("admissible"), data.name)
        self.n_original = len(data)
        X = data.frame.to_numpy(np.int64)

        rho = zcdp_budget(budget.eps, budget.delta, self.params.get("conversion", "cks20"))
        sigma = math.sqrt(3 / (2 * rho))
        s1, s2 = sigma * math.sqrt(d), sigma * math.sqrt(d - 1)
        self.rho = rho

        counts = histograms(X, self.domain, [(i,) for i in range(d)])
        noisy = gaussian_zcdp(np.concatenate(counts), math.sqrt(d), s1, rng, ledger,
                              note=f"1-way marginals of {d} attributes (rho/3)")
        one_way = np.split(noisy, np.cumsum(self.domain)[:-1])
        self.compression, meas = compress(one_way, s1, bool(self.params.get("compress", True)))
        Xc, self.cdomain = self.compression.encode(X, self.domain)

        I, J = pairs_of(d)
        q = self.scores(Xc, meas, I, J)
        edges = self.select(q, I, J, d, self.roles, rho / 3, rng, ledger)
        self.fair_tree = is_fair(edges, d, self.roles)
        if self.fair and not self.fair_tree and not self.params.get("ref_code_candidate_filter", False):
            raise AssertionError(f"{self.name} selected an unfair tree {edges}")

        tables = histograms(Xc, self.cdomain, edges)
        noisy2 = gaussian_zcdp(np.concatenate([t.ravel() for t in tables]), math.sqrt(d - 1), s2, rng, ledger,
                               note=f"2-way marginals of the {d - 1} tree edges (rho/3)")
        sizes = np.cumsum([t.size for t in tables])[:-1]
        for (i, j), t, y in zip(edges, tables, np.split(noisy2, sizes), strict=True):
            meas.append(Measurement((i, j), y.reshape(t.shape), np.full(t.shape, s2**2), t.size * s2**2))
        self.model: TreeModel = fit_tree(self.cdomain, edges, meas)
        self.edges = edges
        self.fit_seconds = time.perf_counter() - t0
        return self

    def scores(self, Xc, meas, I, J) -> np.ndarray:
        """q_ij = |M_ij(D') - Nhat phat_i phat_j|_1 with phat from the 1-way measurements (sensitivity 1)."""
        total1 = float(max(1.0, np.sum([m.y.sum() / m.total_var for m in meas])
                           / np.sum([1 / m.total_var for m in meas])))
        phat = [project_simplex(m.y, total1, w=1 / m.var) / total1 for m in meas]
        pairs = list(zip(I.tolist(), J.tolist(), strict=True))
        exact = histograms(Xc, self.cdomain, pairs)
        return np.array([np.abs(M - total1 * np.outer(phat[i], phat[j])).sum()
                         for (i, j), M in zip(pairs, exact, strict=True)])

    # -- release ------------------------------------------------------------------------------------------
    def n_rows(self) -> int:
        how = self.params.get("rows", "nhat")
        if how == "nhat":
            return int(self.model.total)
        if how == "n_original":
            return self.n_original
        raise ConfigError(f"algo.rows={how!r} is unknown; allowed: nhat, n_original")

    def sample(self, n, rng) -> pd.DataFrame:
        codes = self.compression.decode(self.model.sample(int(n), rng), rng)
        return pd.DataFrame(codes, columns=self.columns)

    def evaluate(self, train, test, rng) -> dict[str, float]:
        t0 = time.perf_counter()
        self.synthetic = self.sample(self.n_rows(), rng)
        runtime = self.fit_seconds + time.perf_counter() - t0
        out = release_metrics(train.frame, self.synthetic, train.domain, int(self.params.get("max_cells", 10_000)))
        out |= downstream_metrics(self.synthetic, test, self.columns, self.roles, self.params, rng)
        return out | {"runtime": runtime, "n_synthetic": len(self.synthetic)}

    def extra_metrics(self) -> dict[str, float]:
        return {"rho": self.rho, "tree_fair": float(self.fair_tree)}

    def artifacts(self, run_dir) -> None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        with gzip.open(run_dir / "synthetic.csv.gz", "wt") as f:
            self.synthetic.to_csv(f, index=False)
        tree = {"edges": [[self.columns[i], self.columns[j]] for i, j in self.edges], "fair": self.fair_tree,
                "roles": {k: sorted(self.columns[i] for i in getattr(self.roles, k))
                          for k in ("protected", "admissible", "outcome")}}
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

    def select(self, q, I, J, d, roles, rho_sel, rng, ledger):
        pairs = list(zip(I.tolist(), J.tolist(), strict=True))
        if self.params.get("ref_code_candidate_filter", False):
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

    def select(self, q, I, J, d, roles, rho_sel, rng, ledger):
        if self.params.get("search_variant", "exact") != "exact":
            raise ConfigError("algo.search_variant: only `exact` is implemented (see the module docstring, A7)")
        r = q.size
        sigma_q = math.sqrt(r / (2 * rho_sel))
        qt = gaussian_zcdp(q, math.sqrt(r), sigma_q, rng, ledger, note=f"noisy weights of {r} pairs (rho/3)")
        edges, self.expansions = best_fair_tree(qt.max() - qt, I, J, d, roles,
                                                int(self.params.get("max_expansions", 2_000_000)))
        return edges

    def extra_metrics(self):
        return super().extra_metrics() | {"search_expansions": float(self.expansions)}


# ---------------------------------------------------------------------------------------------- metrics (§9)
def _pair_tables(real: pd.DataFrame, synth: pd.DataFrame, domain: dict, k: int, max_cells: int):
    cols = [c for c in domain if c in synth.columns]
    for c in combinations(cols, k):
        if int(np.prod([domain[x] for x in c])) <= max_cells:
            yield c, core_metrics.marginal(real, c, domain) * len(real), core_metrics.marginal(
                synth, c, domain) * len(synth)


def bergsma_v(table: np.ndarray) -> float:
    """Bias-corrected Cramér's V (Bergsma 2013) of a contingency table; empty rows/columns are dropped."""
    t = np.asarray(table, dtype=float)
    t = t[t.sum(axis=1) > 0][:, t.sum(axis=0) > 0]
    r, c = t.shape
    n = t.sum()
    if r < 2 or c < 2 or n < 2:
        return 0.0
    e = np.outer(t.sum(axis=1), t.sum(axis=0)) / n
    phi2 = ((t - e) ** 2 / e).sum() / n
    phi2c = max(0.0, phi2 - (r - 1) * (c - 1) / (n - 1))
    rc, cc = r - (r - 1) ** 2 / (n - 1), c - (c - 1) ** 2 / (n - 1)
    den = min(rc - 1, cc - 1)
    return float(math.sqrt(phi2c / den)) if den > 0 else 0.0


def ref_code_v(table: np.ndarray) -> float:
    """The reference code's Cramér's V (A13): the n x 2 matrix of the rows' raw codes (zeros replaced by 1) is
    treated as a contingency table, with the bias correction for r = c = 2. Computed from the pair's count
    table: row (u, v) of that matrix occurs n_uv times."""
    t = np.asarray(table, dtype=float)
    u = np.maximum(np.arange(t.shape[0]), 1)[:, None] * np.ones_like(t)
    v = np.maximum(np.arange(t.shape[1]), 1)[None, :] * np.ones_like(t)
    c1, c2 = (t * u).sum(), (t * v).sum()
    n = c1 + c2
    r = u + v
    e1, e2 = r * c1 / n, r * c2 / n
    phi2 = (t * ((u - e1) ** 2 / e1 + (v - e2) ** 2 / e2)).sum() / n
    phi2c = max(0.0, phi2 - 1 / (n - 1))
    return float(math.sqrt(phi2c / (1 - 1 / (n - 1))))


def release_metrics(real: pd.DataFrame, synth: pd.DataFrame, domain: dict, max_cells: int = 10000) -> dict:
    """1-way / 2-way TVD (marginals with <= max_cells cells), ACD (Bergsma) and the reference code's ACD."""
    tv1 = [core_metrics.tvd(a / a.sum(), b / b.sum()) for _, a, b in _pair_tables(real, synth, domain, 1, max_cells)]
    tv2, acd, acd_ref = [], [], []
    for _, a, b in _pair_tables(real, synth, domain, 2, max_cells):
        tv2.append(core_metrics.tvd(a / a.sum(), b / b.sum()))
        acd.append(abs(bergsma_v(a) - bergsma_v(b)))
        acd_ref.append(abs(ref_code_v(a) - ref_code_v(b)))
    return {"tvd_1way": float(np.mean(tv1)), "tvd_2way": float(np.mean(tv2)), "acd": float(np.mean(acd)),
            "acd_ref_code": float(np.mean(acd_ref)) / 2}


def _defined_mean(x: np.ndarray) -> float:
    ok = ~np.isnan(x)
    return float(x[ok].mean()) if ok.any() else float("nan")


def conditional_gaps(yhat, y, s, groups) -> dict[str, float]:
    """CDP, CTPRB, CTNRB over the groups of admissible tuples: `ref_code` = |mean over groups of the S=1 rates -
    mean over groups of the S=0 rates| (each mean over the groups where that rate is defined); `weighted` =
    |sum_a P(A=a) (rate(1, a) - rate(0, a))| over groups where both are defined (the seed's E_A)."""
    yhat, y, s = (np.asarray(v).astype(bool) for v in (yhat, y, s))
    g = np.asarray(groups)
    n_g = int(g.max()) + 1
    weight = np.bincount(g, minlength=n_g) / len(g)
    out = {}
    for name, num, den in (("cdp", yhat, np.ones_like(y)), ("ctprb", yhat & y, y), ("ctnrb", ~yhat & ~y, ~y)):
        rate = {}
        for v in (0, 1):
            m = s == v
            dd = np.bincount(g[m & den], minlength=n_g)
            nn = np.bincount(g[m & num], minlength=n_g)
            rate[v] = np.where(dd > 0, nn / np.maximum(dd, 1), np.nan)
        both = ~np.isnan(rate[0]) & ~np.isnan(rate[1])
        out[name] = abs(_defined_mean(rate[1]) - _defined_mean(rate[0]))
        out[f"{name}_weighted"] = abs(float(np.sum(weight[both] * (rate[1][both] - rate[0][both]))))
    return out


def train_mlp(X: np.ndarray, y: np.ndarray, rng: np.random.Generator, epochs: int = 20, batch: int = 50):
    """The reference code's Keras MLP: 20-20-10-5-1, ReLU, He-normal weights, zero biases, sigmoid output,
    binary cross-entropy, Adam (Keras defaults: lr 1e-3, betas 0.9 / 0.999, eps 1e-7), batch 50. Written in
    numpy: for a net this small the per-step overhead of an autograd framework dominates."""
    sizes = [X.shape[1], 20, 20, 10, 5, 1]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        params += [rng.normal(0, math.sqrt(2 / a), size=(a, b)), np.zeros(b)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    lr, b1, b2, eps_adam = 1e-3, 0.9, 0.999, 1e-7
    n_layers = len(sizes) - 1
    step = 0
    for _ in range(epochs):
        perm = rng.permutation(len(X))
        for k in range(0, len(X), batch):
            idx = perm[k:k + batch]
            acts = [X[idx]]
            for layer in range(n_layers):
                z = acts[-1] @ params[2 * layer] + params[2 * layer + 1]
                acts.append(np.maximum(z, 0) if layer < n_layers - 1 else z)
            with np.errstate(over="ignore"):  # exp overflow -> inf -> sigmoid 0, which is exact
                grad = (1 / (1 + np.exp(-acts[-1][:, 0])) - y[idx])[:, None] / len(idx)  # d BCE / d logit
            grads = [None] * len(params)
            for layer in reversed(range(n_layers)):
                grads[2 * layer] = acts[layer].T @ grad
                grads[2 * layer + 1] = grad.sum(axis=0)
                if layer:
                    grad = (grad @ params[2 * layer].T) * (acts[layer] > 0)
            step += 1
            corr = math.sqrt(1 - b2**step) / (1 - b1**step)
            for p, g, mm, vv in zip(params, grads, m, v, strict=True):
                mm *= b1
                mm += (1 - b1) * g
                vv *= b2
                vv += (1 - b2) * g * g
                p -= lr * corr * mm / (np.sqrt(vv) + eps_adam)

    def predict(Z):
        h = np.asarray(Z, dtype=float)
        for layer in range(n_layers):
            h = h @ params[2 * layer] + params[2 * layer + 1]
            h = np.maximum(h, 0) if layer < n_layers - 1 else h
        return (h[:, 0] > 0).astype(int)

    return predict


def train_classifier(kind: str, X, y, rng, params) -> callable:
    if kind == "mlp":
        return train_mlp(X, y, rng, int(params.get("mlp_epochs", 20)))
    if kind == "lr":
        from sklearn.linear_model import LinearRegression

        model = LinearRegression().fit(X, y)
    elif kind == "rf":
        from sklearn.ensemble import RandomForestRegressor

        model = RandomForestRegressor(n_estimators=int(params.get("rf_trees", 200)), n_jobs=2,
                                      random_state=int(rng.integers(2**31))).fit(X, y)
    else:
        raise ConfigError(f"algo.classifiers: {kind!r} is unknown; allowed: mlp, lr, rf")
    return lambda Z: np.rint(np.clip(model.predict(Z), 0, 1)).astype(int)


def downstream_metrics(synth: pd.DataFrame, test, columns, roles: Roles, params, rng) -> dict[str, float]:
    """Train on the synthetic table, test on real data (§9 items 4-5). Features: every attribute but the
    outcome, raw codes. The first classifier also fills `accuracy` and `risk_difference` (signed DP).
    The gaps are between the card's s = 1 and s = 0; for each attribute in the card's `roles.audit` they are also
    computed between its codes 1 and 0 (rows with other codes left out), keyed `<gap>_<attribute>`: the
    reference code's `S == 1` / `S == 0` comparison applied to a multi-valued protected attribute."""
    outcome = columns[min(roles.outcome)]
    y_real = test.frame[outcome].to_numpy()
    if not np.array_equal(y_real == 1, test.y.astype(bool)):
        raise DataError(f"data={test.name}: the outcome {outcome} must be coded 1 = the card's positive label")
    if test.s is None:
        raise DataError(f"data={test.name}: the fairness metrics need the card's `sensitive` attribute")
    feats = [c for c in columns if c != outcome]
    admissible = [columns[i] for i in sorted(roles.admissible)]
    _, groups = np.unique(test.frame[admissible].to_numpy(), axis=0, return_inverse=True)
    audit = {}
    for attr in (test.roles or {}).get("audit") or []:
        if attr not in test.frame.columns:
            raise DataError(f"data={test.name}: roles.audit names {attr!r}, not an attribute of its discrete view")
        code = test.frame[attr].to_numpy()
        audit[attr.lower()] = (code <= 1, code == 1)
    kinds = params.get("classifiers", ["mlp", "lr"])
    out = {}
    for n, kind in enumerate([kinds] if isinstance(kinds, str) else kinds):
        predict = train_classifier(kind, synth[feats].to_numpy(float), (synth[outcome].to_numpy() == 1).astype(
            float), rng, params)
        yhat = predict(test.frame[feats].to_numpy(float))
        m = {"accuracy": float(np.mean(yhat == test.y))} | fairness_gaps(yhat, test.y, test.s, groups.ravel())
        m["risk_difference"] = core_metrics.GroupRates(test.y, yhat, test.s).difference("positive_rate")
        for name, (rows, s) in audit.items():
            gaps = fairness_gaps(yhat[rows], test.y[rows], s[rows], groups.ravel()[rows])
            m |= {f"{k}_{name}": v for k, v in gaps.items()}
        out |= {f"{k}_{kind}": v for k, v in m.items()}
        if n == 0:
            out |= m
    return out


def fairness_gaps(yhat, y, s, groups) -> dict[str, float]:
    """§9 item 5: |DP|, |TPRB|, |TNRB|, accuracy parity and the conditional gaps between s = 1 and s = 0."""
    rates = core_metrics.GroupRates(y, yhat, s)
    return {"dp": abs(rates.difference("positive_rate")), "tprb": abs(rates.difference("tpr")),
            "tnrb": abs(rates.difference("tnr")), "accuracy_parity": abs(rates.difference("accuracy"))
            } | conditional_gaps(yhat, y, s, groups)
