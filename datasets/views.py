"""Views: what an algorithm needs beyond its dataset card, derived on demand (DESIGN.md, "Datasets, views and
recipes"). A view applies only where the card does not declare what the algorithm needs: a card with its own
small `discrete:` domain (adult_ffpdg, compas) or its own `causal_graph:` block (adult_cfgan) keeps it. Options
are the card's `views:` block (configs/data_defaults/default.yaml), set per run as `data.views.<view>.<key>=...`.

`enumerable` (FairMaxEnt, RON-Gauss, LapMech: `enumerable_view`, a card -> a card, from its keys alone): a
discrete view whose full domain holds at most `views.enumerable.cells` cells (auto: registry.ENUMERABLE_CELLS).
- Numeric attributes (the card's `bins`, declared or derived from `features.numeric` bounds) are cut into k
  equal-width bins between their first and last declared edge (fewer when the declared view has fewer codes);
  `views.enumerable.bins` fixes k, auto picks it (below).
- Categorical attributes keep their declared levels: the card's `discrete.<col>.levels`, else its documented
  schema `levels.<col>` (public metadata copied from the dataset's documentation, e.g. adult.names), else the
  levels a `derive:` rule names. The sensitive attribute without declared levels is coded as the card's
  `privileged` value against the rest (that is s itself), the label as `positive` against the rest.
- An attribute whose levels the card does not declare is dropped: counting them would read the data, which is
  not free of privacy cost; the run says which and names the key to declare (`data.levels.<col>`).
- Which attributes fit: the label and the sensitive attribute always; the others (or `views.enumerable.keep`)
  smallest first, ties by role (protected, admissible, other) and then card order, each kept while the product of
  the kept sizes stays within the budget, the rest dropped. Auto k keeps the most attributes with numeric ones
  in at least MIN_BINS bins (2 or 3 only when no larger k fits), at the coarsest k that keeps that many; k is then
  raised (up to MAX_BINS) while those attributes still fit.
Every choice reads declared keys only (bounds, levels, roles), never the rows: the view costs no privacy budget.

`causal_graph` (the CFGAN family: `causal_view`, after the split, on the training rows): binary nodes and a
causal graph learned from the rows, for a card without a `causal_graph:` block.
- Nodes: the discrete view's attributes, at most `views.causal.max_nodes` (the label, the sensitive attribute,
  the other protected, the admissible, then the rest in card order). The sensitive node is s (1 = `privileged`),
  the outcome node y (1 = `positive`); a two-level attribute keeps its code; an ordered (binned) attribute is 1
  above the training rows' median code; any other attribute is 1 at its most common level among the training
  rows. A node constant on the training rows is left out.
- The graph: non-private PC-stable with G^2 (`views.causal.tau`, pcalg's small-sample rule, conditioning sets of
  at most `views.causal.max_order` nodes: null = no cap, a minute on Adult's training rows) on the training rows,
  oriented by the separating sets and Meek's rules, then made a DAG with background knowledge: the other
  protected attributes first (exogenous: the context O of the counterfactual effect), then the sensitive node,
  the outcome last, the rest in the order the learned orientations give (card order where they leave it open or
  conflict); every skeleton edge points from the earlier node to the later. When no directed path leads from
  the sensitive node to the outcome, the edge S -> Y is added (every effect would be 0 by construction).
- The unjustified set R of the indirect path set: the children of S on a path to Y that the card's roles do not
  call admissible, less any reachable from another child of S (so that the path set stays identifiable).
These choices read the rows (the thresholds, the most common levels, the graph): the view is not private, and is
given only to algorithms that are not (the CFGAN family's guarantee is `none`); the run's warnings say that the
graph was learned, not given, and list its edges.

`onehot` (the FairGAN family: `onehot_view`, after the split): a discrete view whose one-hot record is at most
registry.ONEHOT_WIDTH columns wide. A card whose declared levels and bins fit provides it; otherwise the widest
attributes of the loaded view (KDD's instance weight, 123,232 levels) are left out until it fits, the card's own
discrete view unchanged for every other algorithm. The widths of undeclared attributes are read off the rows, so it
too is given only to non-private algorithms; a view that already fits is left as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privfair_cli import lazy
from privfair_cli.errors import ConfigError, DataError

pd = lazy.module("pandas")

AUTO = "auto"
MAX_BINS = 16  # auto k of the enumerable view: tried from 2 to this
MIN_BINS = 4  # auto k of the enumerable view: at least this many bins per numeric attribute where any k that large fits
ROLE_RANK = {"protected": 0, "admissible": 1}  # the others rank 2
CAUSAL_N_MIN_FACTOR = 10  # pcalg's G^2 small-sample rule (p-value 1 when n < 10 df), as algo=pc


def options(card: dict, view: str) -> dict:
    """The card's `views.<view>` options (an absent block: every option at its default)."""
    return dict(((card.get("views") or {}).get(view)) or {})


# ---------------------------------------------------------------------------------------------- enumerable
@dataclass(frozen=True)
class Enumerable:
    spec: dict  # the derived `discrete:` section, in the card's attribute order
    bins: int
    cells: int
    budget: int
    dropped: tuple[str, ...]  # attributes with a declared domain (those in `keep` if given) that did not fit
    undeclared: tuple[str, ...]  # attributes whose levels the card does not declare

    def note(self, name: str) -> str:
        parts = [f"data={name}: the enumerable view (derived from the card's declared bounds and levels, no privacy "
                 f"cost) keeps {', '.join(self.spec)}: {self.cells:,} cells (budget {self.budget:,}), numeric "
                 f"attributes in at most {self.bins} equal-width bins"]
        if self.dropped:
            parts.append(f"dropped to fit: {', '.join(self.dropped)}")
        if self.undeclared:
            parts.append(f"dropped, levels not declared (declare data.levels.<column> to keep them): "
                         f"{', '.join(self.undeclared)}")
        return "; ".join(parts)


def declared_levels(card: dict, col: str) -> list[str] | None:
    """The levels of `col` the card declares: `discrete.<col>.levels`, its documented `levels.<col>`, the
    `features.levels.<col>` of the classifier view, or the values a `derive:` rule gives it (a map with a default,
    or a cut's labels); None when it declares none."""
    for source in (((card.get("discrete") or {}).get(col) or {}), card.get("levels") or {},
                   (card.get("features") or {}).get("levels") or {}):
        levels = source.get("levels") if source is ((card.get("discrete") or {}).get(col) or {}) else source.get(col)
        if levels:
            return [str(v) for v in levels]
    rule = (card.get("derive") or {}).get(col) or {}
    if "labels" in rule:
        return [str(v) for v in rule["labels"]]
    if "map" in rule and "default" in rule:
        return sorted({str(v) for v in rule["map"].values()} | {str(rule["default"])})
    return None


def _attributes(card: dict, spec: dict) -> tuple[dict, list[str]]:
    """{col: (fine size, how)} of the attributes whose domain the card declares; the others' names."""
    sens, label = card.get("sensitive"), card.get("label")
    known, undeclared = {}, []
    for col, how in spec.items():
        how = dict(how or {})
        if "bins" in how:
            known[col] = (len(how["bins"]) - 1, how)
        elif "one_of" in how:
            known[col] = (2, how)
        elif (levels := declared_levels(card, col)) is not None and ("map" not in how or how.get("levels")):
            known[col] = (len(levels), {k: v for k, v in how.items() if k != "map"} | {"levels": levels})
        elif col == sens and card.get("privileged") is not None:
            known[col] = (2, {"one_of": [card["privileged"]]})
        elif col == label and card.get("positive") is not None:
            known[col] = (2, {"one_of": list(card["positive"])})
        else:
            undeclared.append(col)
    if sens and sens not in known and card.get("privileged") is not None:
        known[sens] = (2, {"one_of": [card["privileged"]]})
    if label and label not in known and card.get("positive") is not None:
        known[label] = (2, {"one_of": list(card["positive"])})
    return known, undeclared


def _coarse(how: dict, fine: int, k: int) -> tuple[int, dict]:
    """An attribute at k bins: a numeric one in min(k, its codes) equal-width bins of its declared range."""
    if "bins" not in how or fine <= k:
        return fine, how
    lo, hi = float(how["bins"][0]), float(how["bins"][-1])
    return k, {"bins": [float(v) for v in np.linspace(lo, hi, k + 1)]}


def _budget(card: dict) -> int:
    from privfair_cli.registry import ENUMERABLE_CELLS

    cells = options(card, "enumerable").get("cells", AUTO)
    return ENUMERABLE_CELLS if cells in (AUTO, None) else int(cells)


def enumerable_view(card: dict) -> Enumerable | None:
    """The enumerable view of a card (see the module docstring), or None when not even the label and the sensitive
    attribute with one more attribute fit the budget. Reads the card's keys only."""
    from privfair_cli.datasets import discrete_spec

    opts = options(card, "enumerable")
    budget, bins, keep = _budget(card), opts.get("bins", AUTO), opts.get("keep")
    spec = discrete_spec(card)
    known, undeclared = _attributes(card, spec)
    fixed = [c for c in (card.get("label"), card.get("sensitive")) if c in known]
    order = list(dict.fromkeys(list(spec) + fixed))
    roles = card.get("roles") or {}
    rank = {c: min([ROLE_RANK[r] for r in ROLE_RANK if c in (roles.get(r) or [])], default=2) for c in known}
    if keep is not None:
        bad = [c for c in keep if c not in known]
        if bad:
            raise ConfigError(f"data.views.enumerable.keep names {bad}, not attributes with a declared domain; "
                              f"allowed: {', '.join(c for c in known if c not in fixed)}")
    candidates = [c for c in (keep if keep is not None else known) if c not in fixed]
    ks = [int(bins)] if bins not in (AUTO, None) else list(range(2, MAX_BINS + 1))

    def sizes(k: int) -> dict[str, tuple[int, dict]]:
        return {c: _coarse(known[c][1], known[c][0], k) for c in known}

    def fit(k: int) -> list[str]:
        sized, cells, kept = sizes(k), math.prod(sizes(k)[c][0] for c in fixed), list(fixed)
        for c in sorted(candidates, key=lambda c: (sized[c][0], rank[c], order.index(c))):
            if cells * sized[c][0] <= budget:
                kept.append(c)
                cells *= sized[c][0]
        return kept if cells <= budget and len(kept) > len(fixed) else []

    fits = {k: kept for k in ks if (kept := fit(k))}
    if not fits:
        return None
    k0 = max(fits, key=lambda k: (k >= MIN_BINS, len(fits[k]), -k))  # the most attributes, at the coarsest such k
    kept = fits[k0]
    k = max(k for k in ks if k >= k0 and math.prod(sizes(k)[c][0] for c in kept) <= budget)  # then refine
    sized = sizes(k)
    return Enumerable({c: sized[c][1] for c in order if c in kept}, k, math.prod(sized[c][0] for c in kept), budget,
                      tuple(c for c in order if c in candidates and c not in kept), tuple(undeclared))


def enumerable_card(card: dict) -> tuple[dict, str]:
    """The card with its `discrete:` section replaced by the enumerable view and its roles restricted to the kept
    attributes (the sensitive attribute counted as protected, the label as the outcome), and the run's note."""
    view = enumerable_view(card)
    if view is None:
        raise ConfigError(f"data={card.get('name')}: no enumerable view fits data.views.enumerable.cells="
                          f"{_budget(card):,}: raise it, or declare the levels of more attributes (data.levels)")
    roles = {k: [c for c in v or [] if c in view.spec] for k, v in (card.get("roles") or {}).items()}
    if card.get("sensitive") and card["sensitive"] not in roles.get("protected", []):
        roles["protected"] = [card["sensitive"], *roles.get("protected", [])]
    if card.get("label") and not roles.get("outcome"):
        roles["outcome"] = [card["label"]]
    roles = {k: v for k, v in roles.items() if v}
    return card | {"discrete": view.spec, "roles": roles, "discrete_max_codes": None}, view.note(card.get("name"))


# ---------------------------------------------------------------------------------------------- one-hot width
def declared_width(card: dict) -> int | None:
    """The one-hot width of the card's discrete view (every attribute but the sensitive one and the label) from its
    keys (`levels`, `bins`, `one_of`), or None when an attribute takes its levels from the rows."""
    from privfair_cli.datasets import discrete_spec

    width = 0
    for col, how in discrete_spec(card).items():
        how = how or {}
        if col in (card.get("sensitive"), card.get("label")):
            continue
        if how.get("levels"):
            width += len(how["levels"])
        elif how.get("bins"):
            width += len(how["bins"]) - 1
        elif how.get("one_of") is not None:
            width += 2
        else:
            return None
    return width


def onehot_view(train, test, card: dict):
    """(train, test, note or None): the discrete view without its widest attributes (never the sensitive one or the
    label) until the one-hot record is at most registry.ONEHOT_WIDTH columns wide; the widths are the loaded levels
    (read off the rows where the card declares none), so only non-private algorithms get it. The tables as they are
    when they fit."""
    from privfair_cli.registry import ONEHOT_WIDTH

    keep = {card.get("sensitive"), card.get("label")}
    sizes = {c: int(k) for c, k in train.domain.items() if c not in keep}
    dropped = []
    for col in sorted(sizes, key=lambda c: -sizes[c]):
        if sum(sizes.values()) <= ONEHOT_WIDTH:
            break
        dropped.append(col)
        sizes.pop(col)
    if not dropped:
        return train, test, None
    cut = [type(t)(**{**t.__dict__, "frame": t.frame.drop(columns=dropped),
                      "domain": {c: k for c, k in t.domain.items() if c not in dropped},
                      "roles": {r: [c for c in v if c not in dropped] for r, v in t.roles.items()}})
           for t in ([train] if test is train else [train, test])]
    note = (f"data={card.get('name')}: its discrete view's one-hot record would exceed {ONEHOT_WIDTH:,} columns: "
            f"left out {', '.join(f'{c} ({train.domain[c]:,} levels)' for c in dropped)} (their level counts read "
            f"off the rows; this algorithm is not private)")
    return cut[0], cut[-1], note


# ---------------------------------------------------------------------------------------------- causal graph
def causal_nodes(card: dict, columns: list[str]) -> list[str]:
    """The attributes the causal view makes nodes of, in priority order, at most `views.causal.max_nodes`."""
    from privfair_cli.algorithms.causal_effects import MAX_NODES

    limit = int(options(card, "causal").get("max_nodes") or MAX_NODES)
    roles = card.get("roles") or {}
    first = [card.get("label"), card.get("sensitive"), *(roles.get("protected") or []),
             *(roles.get("admissible") or [])]
    ordered = list(dict.fromkeys([c for c in first if c in columns] + list(columns)))
    return ordered[:limit]


def _binary(frame: pd.DataFrame, spec: dict, domain: dict, train_rows: np.ndarray) -> dict[str, np.ndarray]:
    """The 0/1 node of every attribute (module docstring), thresholds read on `train_rows` only."""
    out = {}
    for col in frame.columns:
        codes = frame[col].to_numpy(np.int64)
        ref = codes[train_rows]
        if domain.get(col) == 2:
            node = codes == 1
        elif "bins" in (spec.get(col) or {}):
            cut = np.median(ref)
            node = codes > cut if (ref > cut).any() else codes >= cut
        else:
            node = codes == np.bincount(ref).argmax()
        out[col] = node.astype(np.int64)
    return out


def _dag(names: list[str], adjacency: np.ndarray, cpdag: np.ndarray, sens: str, label: str,
         context: list[str]) -> dict[str, list[str]]:
    """Children per node: the skeleton oriented along one order (context, S, the rest by the learned
    orientations, Y)."""
    rest = [n for n in names if n not in (sens, label, *context)]
    idx = {n: i for i, n in enumerate(names)}
    parents = {n: {m for m in rest if cpdag[idx[m], idx[n]] and not cpdag[idx[n], idx[m]]} for n in rest}
    order = [*context, sens]
    left = list(rest)
    while left:
        ready = [n for n in left if not parents[n] & set(left)] or left[:1]  # a conflict: card order decides
        order.append(ready[0])
        left.remove(ready[0])
    order.append(label)
    pos = {n: i for i, n in enumerate(order)}
    children = {n: [] for n in order}
    for i, j in zip(*np.nonzero(np.triu(adjacency, 1)), strict=True):
        a, b = sorted((names[i], names[j]), key=pos.get)
        children[a].append(b)
    return children


def _unjustified(graph, admissible: set[str]) -> list[str]:
    """R: the children of S on a path to Y that are not admissible, less any reachable from another child of S."""
    from privfair_cli.algorithms import causal_effects as ce

    to_y = graph.ancestors(graph.outcome)
    kids = [c for c in graph.children(graph.sensitive) if c in to_y]
    chosen = [c for c in kids if c not in admissible]
    while True:
        reach = set().union(*[graph.descendants(c) for c in kids if c not in chosen])
        kept = [c for c in chosen if c not in reach]
        if kept == chosen:
            break
        chosen = kept
    try:
        ce.path_edges(ce.CausalGraph(graph.nodes, graph.parents, graph.sensitive, graph.outcome, tuple(chosen)),
                      "indirect")
    except ConfigError:
        return []
    return chosen


def causal_view(train, test, card: dict):
    """(train, test, note): both tables as binary nodes, with the graph learned on the training rows in
    `meta["causal_graph"]` (see the module docstring); `test is train` when the card has no held-out rows."""
    from privfair_cli.algorithms import causal_effects as ce
    from privfair_cli.algorithms.causal import orient, skeleton
    from privfair_cli.algorithms.citests import GSquare
    from privfair_cli.datasets import discrete_spec

    sens, label = card.get("sensitive"), card.get("label")
    if train.frame is None or train.s is None:
        raise DataError(f"data={card.get('name')}: the causal view needs a discrete view and a sensitive attribute")
    parts = [train] if test is train else [train, test]
    both = pd.concat([p.frame for p in parts], ignore_index=True)
    is_train = np.arange(len(both)) < len(train)
    columns = causal_nodes(card, list(both.columns))
    nodes = _binary(both[[c for c in columns if c not in (sens, label)]], discrete_spec(card), train.domain,
                    is_train)
    nodes[sens] = np.concatenate([p.s for p in parts]).astype(np.int64)
    nodes[label] = np.concatenate([p.y for p in parts]).astype(np.int64)
    names = [c for c in columns if c in (sens, label) or np.ptp(nodes[c][is_train]) > 0]
    codes = np.stack([nodes[c][is_train] for c in names], axis=1)
    tau = float(options(card, "causal").get("tau") or 0.01)
    adj, sepset, _ = skeleton(GSquare(codes, np.full(len(names), 2), "g2", CAUSAL_N_MIN_FACTOR), tau,
                              options(card, "causal").get("max_order"))
    roles = card.get("roles") or {}
    context = [c for c in roles.get("protected") or [] if c in names and c != sens]
    children = _dag(names, adj, orient(adj, sepset), sens, label, context)
    graph = {"name": "learned_pc", "sensitive": sens, "outcome": label, "nodes": list(children),
             "edges": {n: kids for n, kids in children.items() if kids}, "context": context}
    added = ""
    if sens not in _ancestors(children, label):
        graph["edges"].setdefault(sens, []).append(label)
        added = f"; no directed path led from {sens} to {label}, so the edge {sens} -> {label} was added"
    graph["unjustified"] = _unjustified(ce.CausalGraph.from_spec(graph, names), set(roles.get("admissible") or []))
    g = ce.CausalGraph.from_spec(graph, names)
    others = [n for n in g.nodes if n not in (sens, label)]
    out = []
    for part, rows in zip(parts, (is_train, ~is_train), strict=False):
        frame = pd.DataFrame({n: nodes[n][rows] for n in g.nodes})
        meta = {k: v for k, v in part.meta.items() if k.startswith("row_")} | {
            "causal_graph": graph, "sensitive_column": sens, "label_column": label, "sensitive_values": [0, 1]}
        out.append(type(part)(part.name, frame[others].to_numpy(float), frame[label].to_numpy(np.int64),
                              frame[sens].to_numpy(np.int64), others, frame, {n: 2 for n in g.nodes},
                              {"protected": [sens, *context], "outcome": [label]}, meta))
    note = (f"data={card.get('name')} declares no causal graph: it was learned, not given, by non-private PC "
            f"(G^2, tau={tau:g}) on the {len(train):,} training rows over {len(names)} binarised nodes (numeric "
            f"attributes above their median, categorical ones at their most common level){added}; unjustified "
            f"set {graph['unjustified']}, context {context}; edges: {', '.join(f'{a}->{b}' for a, b in g.edges())}")
    return out[0], out[-1], note


def _ancestors(children: dict[str, list[str]], node: str) -> set[str]:
    parents = {n: [a for a, kids in children.items() if n in kids] for n in children}
    out, stack = set(), [node]
    while stack:
        for p in parents[stack.pop()]:
            if p not in out:
                out.add(p)
                stack.append(p)
    return out
