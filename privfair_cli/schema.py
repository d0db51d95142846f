"""Typed run configuration. `validate(cfg)` turns the composed Hydra config into these dataclasses or raises
`ConfigError` with a one-line message naming the bad key and what is allowed. It reads no data.

Compatibility (issue 12 items 1, 7): a plugin declares the dataset views it needs (`Plugin.needs` /
`requirements(cfg)`, vocabulary `registry.VIEWS`); `card_views(card)` derives what a card provides from its keys;
`check_compatible` refuses a pair that cannot run, naming the card keys to add, before any data is read.

Sensitive attribute (docs/groups.md): `data.sensitive` is one column or a list (their intersection, written as one
column `sex&race`); `data.privileged` names the reference group's value, or null for the largest group. The binary s
that training reads is the reference group vs the rest; evaluation measures every group. `_sensitive` drops a
`privileged` that is a documented level of another column (the card's own after `data.sensitive=race`) with a note
for the run's warnings, and refuses one that is no documented value at all; an intersection is refused for the kinds
outside GROUP_KINDS and for cards whose loader reads its own columns.

Privacy keys (issue 11 items 4-5, issue 12 item 1):
- `eps`: > 0; `eps=inf` is the noise-free limit (no noise is added, the ledger records the spend at inf, the
  result's guarantee is `none`, and metrics.json writes inf as 1.7976931348623157e308, see privacy/ledger.py).
- `delta`: in [0, 1). A run that leaves it at 0 gets the algorithm's own `default_delta` if it has one, else
  DEFAULT_DELTA (1e-5) when its guarantee needs a delta (`needs_delta`, or a zcdp / rdp accountant); the result
  records the delta used and where it came from (`privacy.delta_source`: run | algorithm | default), and warns
  when delta >= 1/n_train.
- `budget.accountant` (basic | zcdp | rdp; null = the algorithm's own) and `budget.rdp_conversion`
  (classic | balle2020). Every sensitivity in privfair assumes add/remove-one neighbouring datasets.
- `privacy.secure` (bool): noise from OS entropy through floating-point-safe samplers (privacy/noise.py); refused
  for algorithms that draw their noise with their own sampler (`Plugin.own_noise`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from omegaconf import DictConfig, OmegaConf

from privfair_cli import datasets as data_lib
from privfair_cli import registry
from privfair_cli.datasets import tabular
from privfair_cli.datasets import views as views_lib
from privfair_cli.errors import ConfigError
from privfair_cli.privacy.ledger import ACCOUNTANTS, RDP_CONVERSIONS
from privfair_cli.typed import typed

DEVICES = ("auto", "cpu", "cuda")
AUTO = "auto"
# data.unlabelled_size: auto hides this share of the labels for a semi-supervised algorithm on any labelled card
# (the thesis' recipe on Adult, Bank and Health, fair_sampling.md §6: half the rows unlabelled), none otherwise
DEFAULT_UNLABELLED = 0.5
DEFAULT_DELTA = 1e-5  # delta of a run whose guarantee needs one and that sets none (issue 12 item 1)
BUDGET_KEYS = ("accountant", "rdp_conversion")
PRIVACY_KEYS = ("secure",)
GROUP_KINDS = ("classifier", "semi_supervised")  # kinds whose evaluation measures every group of data.sensitive


@dataclass(frozen=True)
class DataCard:
    name: str
    loader: str
    label: str | None = None
    sensitive: str | None = None
    n: int | None = None
    test_size: float = 0.2
    expected_d: int | None = None
    allow_d_mismatch: bool = False
    raw: dict = field(default_factory=dict)
    unlabelled_size: float = 0.0  # semi-supervised runs: fraction of the non-test rows whose labels are hidden
    derive: tuple[str, ...] = ()  # views built from the rows after the split (runner.prepare): causal_graph
    notes: tuple[str, ...] = ()  # what the run chose for the user: derived views, reference group (its warnings)


@dataclass(frozen=True)
class RunConfig:
    eps: float
    delta: float
    seed: int
    device: str
    overwrite: bool
    algo: str
    params: Any  # the plugin's typed Config (a dict for a plugin without one)
    data: DataCard
    mechanism: str  # the mechanism group's choice: default (the algorithm's own) or one of plugin.mechanisms
    save_predictions: bool = True
    accountant: str = "basic"
    rdp_conversion: str = "classic"
    delta_source: str = "run"  # run | algorithm (its default_delta) | default (DEFAULT_DELTA)
    secure: bool = False


def _number(cfg: DictConfig, key: str, kind=float):
    value = OmegaConf.select(cfg, key)
    try:
        if isinstance(value, bool) or value is None:
            raise TypeError
        out = kind(value)
        if kind is int and out != float(value):
            raise ValueError
        return out
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={value!r} is not a{'n integer' if kind is int else ' number'}") from None


def validate_card(card: dict) -> DataCard:
    """The card's keys, checked without reading data: identity, label and sensitive columns, run keys (`n`,
    `test_size`, `verify`, ...), the generic loader's `format` / `derive`, and the fairness `roles`."""
    name = card.get("name")
    if not name:
        raise ConfigError("data: a dataset card needs `name`")
    for key in ("name", "subdir"):
        if card.get(key) is not None:
            data_lib.safe_name(card[key], f"data.{key}")
    loader = card.get("loader") or data_lib.DEFAULT_LOADER
    try:
        module = data_lib.loader_module(card)
    except ModuleNotFoundError:
        raise ConfigError(f"data.loader={loader!r} for dataset {name!r} is not a loader module") from None
    if hasattr(module, "validate"):  # loader-specific card keys (e.g. graphs.py)
        module.validate(card)
    if not hasattr(module, "generate"):
        _check_columns(card, name)
    n, test_size = _check_size(card)
    if n is not None and "network" in getattr(module, "VIEWS", ()):
        raise ConfigError(f"data.n={n} does not apply to a network card: every vertex is kept (a row sample would "
                          f"cut the graph's edges); leave data.n null")
    for key in ("verify", "allow_d_mismatch"):
        if not isinstance(card.get(key, key == "verify"), bool):
            raise ConfigError(f"data.{key}={card[key]!r} must be true or false")
    if card.get("graph_reference") not in (None, "pc"):
        raise ConfigError(f"data.graph_reference={card['graph_reference']!r}; allowed: pc (non-private PC on the "
                          f"same rows), or null")
    _check_format(card)
    _check_features(card)
    _check_discrete(card)
    _check_roles(card)
    _check_views(card)
    unlabelled = card.get("unlabelled_size", AUTO)
    auto = unlabelled == AUTO
    if not auto and (isinstance(unlabelled, bool) or not isinstance(unlabelled, int | float) or
                     not 0 <= unlabelled < 1):
        raise ConfigError(f"data.unlabelled_size={unlabelled!r} must be in [0, 1) or auto")
    unlabelled = 0.0 if auto else unlabelled  # auto: set per algorithm by `validate` (unlabelled_pool view)
    card, notes = _sensitive(card, name) if not hasattr(module, "generate") else (card, [])
    return DataCard(name, loader, card.get("label"), card.get("sensitive"), n, test_size,
                    card.get("expected_d"), bool(card.get("allow_d_mismatch", False)), card, float(unlabelled),
                    notes=tuple(notes))


def _check_columns(card: dict, name: str) -> None:
    if not card.get("label"):
        raise ConfigError(f"data.label is missing for dataset {name!r}: name the label column")
    if "sensitive" not in card:
        raise ConfigError(
            f"data.sensitive is missing for dataset {name!r}: name the sensitive column (or null for none)")
    sens = card.get("sensitive")
    if sens is not None and not (isinstance(sens, str) or isinstance(sens, list | tuple) and sens
                                 and all(isinstance(c, str) and c for c in sens)):
        raise ConfigError(f"data.sensitive={sens!r} must name a column, or list columns for their intersection")
    cols = tabular.sensitive_columns(card)
    if not cols:
        return
    if len(set(cols)) < len(cols) or not all(cols):
        raise ConfigError(f"data.sensitive={sens!r} names a column twice, or an empty one")
    if card["label"] in cols:
        raise ConfigError(f"data.sensitive={sens!r} names the label {card['label']}: the groups must be other rows' "
                          f"attributes than what is predicted")
    generic = card.get("loader") in (None, data_lib.DEFAULT_LOADER)
    if not generic and card.get("privileged") is None:
        raise ConfigError(f"data.privileged is missing for dataset {name!r}: which value of "
                          f"{card['sensitive']} is coded s=1 (data.loader={card['loader']} reads its own columns, so "
                          f"the largest group cannot stand in)")
    if not generic and len(cols) > 1:
        raise ConfigError(f"data.sensitive={sens!r}: an intersection is built by the generic loader, and "
                          f"data.loader={card['loader']} reads its own columns; name one attribute")


def _sensitive(card: dict, name: str) -> tuple[dict, list[str]]:
    """The card with `sensitive` as one column name (an intersection's attributes joined by `&`) and the notes for
    the run's warnings. `privileged` names the reference group's value (datasets/tabular.py); one that is none of
    the attributes' documented levels is a ConfigError, except a documented level of another column (the card's
    own binary attribute after `data.sensitive=race`): it is then dropped, the reference group is the largest,
    and a note says so. Without documented levels the loader checks it against the rows."""
    cols = tabular.sensitive_columns(card)
    if not cols:
        return card, []
    card = card | {"sensitive": tabular.SEP.join(cols)}
    priv = card.get("privileged")
    if priv is None:
        return card, []
    levels = [tabular.known_levels(card, c) for c in cols]
    parts = str(priv).split(tabular.SEP)
    if len(cols) > 1 and len(parts) == len(cols):  # a full intersection value, Male&White
        found = all(p in (lv or [p]) for p, lv in zip(parts, levels, strict=True))
    else:
        found = any(str(priv) in lv for lv in levels if lv)
    if found or any(lv is None for lv in levels):  # undocumented levels: the loader checks it against the rows
        return card, []
    owners = [c for c in data_lib.discrete_spec(card) | (card.get("levels") or {})
              if c not in cols and str(priv) in (tabular.known_levels(card, c) or [])]
    if owners:
        return card | {"privileged": None}, [
            f"data.privileged={priv!r} is a value of {owners[0]}, not of {card['sensitive']}: the reference group "
            f"(s = 1, for training and the binary metrics) is the largest group of {card['sensitive']}; set "
            f"data.privileged to choose it"]
    allowed = ", ".join(v for lv in levels for v in lv)
    raise ConfigError(f"data.privileged={priv!r} is not a value of {' or '.join(cols)}; allowed: {allowed}")


def _check_size(card: dict) -> tuple[int | None, float]:
    """`n` (a positive sample size, or null) and `test_size` in [0, 1), leaving rows on both sides."""
    n = card.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise ConfigError(f"data.n={n!r} must be a positive integer sample size (or null for all rows)")
    if n == 0:
        raise ConfigError("data.n=0 leaves no rows to learn from; give a positive sample size (or null for all rows)")
    test_size = card.get("test_size", 0.2)
    if isinstance(test_size, bool) or not isinstance(test_size, int | float) or not 0 <= test_size < 1:
        raise ConfigError(f"data.test_size={test_size!r} must be in [0, 1)")
    if n is not None and test_size > 0 and "row_is_test" not in card:
        n_test = int(round(test_size * n))
        if n_test == 0 or n_test == n:
            raise ConfigError(f"data.n={n} with data.test_size={test_size:g} leaves "
                              f"{'no test' if n_test == 0 else 'no training'} row; use a larger data.n")
    return n, float(test_size)


def _check_format(card: dict) -> None:
    from privfair_cli.datasets import tabular

    blocks = [("data.format", card.get("format"))] + [
        (f"data.files.{f}.format", (spec or {}).get("format")) for f, spec in (card.get("files") or {}).items()]
    for where, fmt in blocks:
        if fmt is None:
            continue
        if not isinstance(fmt, dict):
            raise ConfigError(f"{where} must be a mapping of {', '.join(tabular.FORMAT_KEYS)}")
        unknown = sorted(set(fmt) - set(tabular.FORMAT_KEYS))
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]} is not a format key; allowed: {', '.join(tabular.FORMAT_KEYS)}")
        bad = {k: v for k, v in (fmt.get("types") or {}).items() if v not in tabular.TYPES}
        if bad:
            col, kind = next(iter(bad.items()))
            raise ConfigError(f"{where}.types.{col}={kind!r} is not a column type; allowed: {', '.join(tabular.TYPES)}")
        if fmt.get("missing", "drop") not in ("drop", "error"):
            raise ConfigError(f"{where}.missing={fmt['missing']!r}; allowed: drop, error")
        if fmt.get("type", "csv") not in ("csv", "arff"):
            raise ConfigError(f"{where}.type={fmt['type']!r}; allowed: csv, arff")
    for new, how in (card.get("derive") or {}).items():
        how = how or {}
        ok = "from" in how and ("map" in how or ("cut" in how and len(how.get("labels") or []) ==
                                                 len(how["cut"]) - 1))
        if not ok:
            raise ConfigError(f"data.derive.{new} must be {{from: column, map: {{...}}}} or "
                              f"{{from: column, cut: [edges], labels: [one per interval]}}")


def _is_number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _check_features(card: dict) -> None:
    """`features`: numeric `{col: [lo, hi]}` with lo < hi (declared bounds: the sensitivities rest on them),
    `onehot` a list of columns, `binary` `{col: value}`, `levels` `{col: [values]}`."""
    feats = card.get("features") or {}
    if not isinstance(feats, dict):
        raise ConfigError("data.features must be a mapping with numeric, onehot, binary, levels")
    unknown = sorted(set(feats) - {"numeric", "onehot", "binary", "levels"})
    if unknown:
        raise ConfigError(f"data.features.{unknown[0]} is not a feature kind; allowed: numeric, onehot, binary, levels")
    for col, bounds in (feats.get("numeric") or {}).items():
        ok = isinstance(bounds, list | tuple) and len(bounds) == 2 and all(map(_is_number, bounds))
        if not ok or bounds[0] >= bounds[1]:
            raise ConfigError(f"data.features.numeric.{col}={bounds!r} must be declared bounds [lo, hi] with lo < hi")
    if not isinstance(feats.get("onehot") or [], list | tuple):
        raise ConfigError(f"data.features.onehot={feats['onehot']!r} must be a list of columns")
    for key in ("binary", "levels"):
        if not isinstance(feats.get(key) or {}, dict):
            raise ConfigError(f"data.features.{key}={feats[key]!r} must be a mapping of columns")
    codes = card.get("discrete_max_codes")
    if codes is not None and (isinstance(codes, bool) or not isinstance(codes, int) or codes < 2):
        raise ConfigError(f"data.discrete_max_codes={codes!r} must be an integer >= 2")


def _check_discrete(card: dict) -> None:
    """`discrete`: per column `{bins: [increasing edges]}`, `{map: {...}, levels: [...]}`, `{one_of: [...]}`
    or `{}` (its levels as they are)."""
    spec = card.get("discrete")
    if spec is None or spec is False:
        return
    if not isinstance(spec, dict):
        raise ConfigError("data.discrete must be a mapping {column: {bins | map | levels | one_of}}")
    for col, how in spec.items():
        how = how or {}
        unknown = sorted(set(how) - {"bins", "map", "levels", "one_of"}) if isinstance(how, dict) else ["?"]
        if unknown:
            raise ConfigError(f"data.discrete.{col} may hold bins, map, levels or one_of, not {unknown[0]}")
        edges = how.get("bins")
        if edges is not None and (not isinstance(edges, list | tuple) or len(edges) < 2
                                  or not all(map(_is_number, edges)) or list(edges) != sorted(set(edges))):
            raise ConfigError(f"data.discrete.{col}.bins={edges!r} must be at least two increasing edges")


VIEW_OPTIONS = {"enumerable": ("cells", "bins", "keep"), "causal": ("tau", "max_nodes", "max_order")}


def _check_views(card: dict) -> None:
    """`levels` (documented levels `{col: [values]}`, read by the derived views) and the `views` options
    (datasets/views.py): enumerable `cells` (auto or >= 4), `bins` (auto or >= 2), `keep` (null or a list of
    attributes); causal `tau` in (0, 1), `max_nodes` (null or >= 2), `max_order` (null or >= 0)."""
    levels = card.get("levels") or {}
    if not isinstance(levels, dict) or not all(isinstance(v, list | tuple) and v for v in levels.values()):
        raise ConfigError(f"data.levels={levels!r} must map columns to their documented levels {{col: [values]}}")
    block = card.get("views") or {}
    if not isinstance(block, dict):
        raise ConfigError(f"data.views must be a mapping with {', '.join(VIEW_OPTIONS)}")
    for view, opts in block.items():
        if view not in VIEW_OPTIONS or not isinstance(opts or {}, dict):
            raise ConfigError(f"data.views.{view} is not a derived view's options; allowed: {', '.join(VIEW_OPTIONS)}")
        unknown = sorted(set(opts or {}) - set(VIEW_OPTIONS[view]))
        if unknown:
            raise ConfigError(f"data.views.{view}.{unknown[0]} is not an option; allowed: "
                              f"{', '.join(VIEW_OPTIONS[view])}")
    enum, causal = block.get("enumerable") or {}, block.get("causal") or {}
    for key, least in (("cells", 4), ("bins", 2)):
        value = enum.get(key, AUTO)
        if value != AUTO and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ConfigError(f"data.views.enumerable.{key}={value!r} must be auto or an integer >= {least}")
    keep = enum.get("keep")
    if keep is not None and (not isinstance(keep, list | tuple) or not all(isinstance(c, str) for c in keep)):
        raise ConfigError(f"data.views.enumerable.keep={keep!r} must be null or a list of attributes")
    tau = causal.get("tau", 0.01)
    if not _is_number(tau) or not 0 < tau < 1:
        raise ConfigError(f"data.views.causal.tau={tau!r} must be in (0, 1)")
    for key, least in (("max_nodes", 2), ("max_order", 0)):
        value = causal.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ConfigError(f"data.views.causal.{key}={value!r} must be null or an integer >= {least}")


ROLE_KEYS = ("protected", "admissible", "outcome", "audit")


def _check_roles(card: dict) -> None:
    """`roles` (prefair.md §1.1): attributes of the discrete view, protected / admissible / outcome disjoint."""
    roles = card.get("roles")
    if not roles:
        return
    unknown = sorted(set(roles) - set(ROLE_KEYS))
    if unknown:
        raise ConfigError(f"data.roles.{unknown[0]} is not a role; allowed: {', '.join(ROLE_KEYS)}")
    columns = list(data_lib.discrete_spec(card))
    if not columns:
        raise ConfigError(f"data.roles needs a discrete view to name attributes of: add `discrete` (or `features`) "
                          f"to the card of data={card['name']}")
    for key, names in roles.items():
        missing = [c for c in names or [] if c not in columns]
        if missing:
            raise ConfigError(f"data.roles.{key} names {missing}, not attributes of the discrete view; "
                              f"allowed: {', '.join(columns)}")
    sets = [set(roles.get(k) or []) for k in ROLE_KEYS[:3]]
    if sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2]:
        raise ConfigError("data.roles: protected, admissible and outcome must be disjoint")


def card_views(card: dict, derived: bool = True) -> set[str]:
    """What a card provides (registry.VIEWS), from its keys alone: a loader module's own `VIEWS` (images,
    synthetic graphs) plus what the card's `label`, `positive`, `sensitive`, `features`, `discrete`, `roles`
    and `graph_reference` give, and (`derived`) the views derived on demand (`derivable_views`)."""
    views = declared_views(card)
    return views | derivable_views(card, views) if derived else views


def derivable_views(card: dict, declared: set[str]) -> set[str]:
    """The views a run derives when an algorithm needs them and the card does not declare them: `unlabelled_pool`
    on a labelled card with held-out rows and `unlabelled_size: auto` (`validate` hides DEFAULT_UNLABELLED of the
    labels), and (datasets/views.py) `enumerable` where a discrete view within the cell budget follows from the
    declared bounds and levels, `causal_graph` (binarised nodes and a graph learned by non-private PC) on a card
    with a discrete view, a binary label and a sensitive attribute."""
    out = set()
    held_out = (card.get("test_size", 0.2) or 0) > 0  # a pool needs labelled test rows to score on
    if card.get("unlabelled_size", AUTO) == AUTO and {"binary_label", "features"} <= declared and held_out:
        out.add("unlabelled_pool")  # a semi-supervised run hides DEFAULT_UNLABELLED of the labels (`validate`)
    if "discrete" in declared and "enumerable" not in declared and reads_card_discrete(card) \
            and views_lib.enumerable_view(card) is not None:
        out.add("enumerable")
    if {"discrete", "binary_label", "sensitive"} <= declared and "causal_graph" not in declared:
        out.add("causal_graph")
    if "discrete" in declared and "onehot" not in declared:
        out.add("onehot")
    return out


def reads_card_discrete(card: dict) -> bool:
    """Whether the card's loaders build its discrete view from its `discrete:` section (a loader module that derives
    its own says `CARD_DISCRETE = False`, e.g. crfs_tables): only then can the enumerable view rewrite it."""
    loaders = (card.get("loader") or data_lib.DEFAULT_LOADER, card.get("base_loader"))
    return all(getattr(data_lib.loader_module({"loader": name}), "CARD_DISCRETE", True) for name in loaders if name)


def declared_views(card: dict) -> set[str]:
    """The views a card's own keys give (card_views without the derived ones)."""
    views = set()
    for loader in (card.get("loader") or data_lib.DEFAULT_LOADER, card.get("base_loader")):
        if loader:
            views |= set(getattr(data_lib.loader_module({"loader": loader}), "VIEWS", ()))
    if card.get("label"):
        views.add("label")
        if card.get("positive") is not None:
            views.add("binary_label")
    if card.get("sensitive"):  # without `privileged` the reference group is the largest (datasets/tabular.py)
        views.add("sensitive")
    if card.get("features"):
        views |= {"features", "numeric"}
    if data_lib.discrete_spec(card):
        views.add("discrete")
        size = data_lib.declared_domain_size(card)
        if size is not None and size <= registry.ENUMERABLE_CELLS:
            views.add("enumerable")
        width = views_lib.declared_width(card)
        if width is not None and width <= registry.ONEHOT_WIDTH:
            views.add("onehot")
    roles = card.get("roles") or {}
    if "discrete" in views and all(roles.get(k) for k in ("protected", "admissible", "outcome")):
        views.add("roles")
    if card.get("graph_reference"):
        views.add("graph_reference")
    unlabelled = card.get("unlabelled_size", AUTO)
    if unlabelled != AUTO and (unlabelled or 0) > 0:
        views.add("unlabelled_pool")
    return views


def missing_views(needs: tuple[str, ...], views: set[str]) -> list[str]:
    return [need for need in needs if not set(need.split("|")) & views]


def check_compatible(algo: str, plugin: type, params: Any, card: dict) -> None:
    """Refuse, in one line naming the card keys to add, a dataset that lacks a view the plugin needs."""
    views = card_views(card)
    missing = missing_views(plugin.requirements(params), views)
    if not missing:
        return
    parts = []
    for alt in (need.split("|") for need in missing):
        what = " or ".join(registry.VIEWS[v][0] for v in alt)
        keys = " or ".join(registry.VIEWS[v][1] for v in alt)
        parts.append(f"{what} (card key {keys})")
    raise ConfigError(f"algo={algo} cannot run on data={card['name']}: it needs {' and '.join(parts)}, which the "
                      f"card does not declare; data={card['name']} provides: {', '.join(sorted(views)) or 'no view'}")


def derive_views(algo: str, plugin: type, params: Any, card: DataCard) -> DataCard:
    """The card with the views the plugin needs and the card does not declare (datasets/views.py): the enumerable
    view rewrites its discrete view here (from keys alone); the causal view is marked for `runner.prepare`, which
    builds it from the training rows, and only for a non-private algorithm (it reads the rows)."""
    declared = declared_views(card.raw)
    wanted = []
    for need in missing_views(plugin.requirements(params), declared):
        alternatives = need.split("|")
        wanted += [next(v for v in alternatives if v in derivable_views(card.raw, declared))]
    raw, notes, derive = card.raw, list(card.notes), list(card.derive)
    if "enumerable" in wanted:
        raw, note = views_lib.enumerable_card(raw)
        validate_card(raw)
        notes.append(note)
    for view, what, keys in (("causal_graph", "the causal view is learned from the rows", "`causal_graph:`"),
                             ("onehot", "the narrower one-hot view counts levels on the rows",
                              "`levels` or `bins` for every attribute of `discrete:`")):
        if view in wanted:
            if plugin.private:
                raise ConfigError(f"algo={algo} cannot run on data={card.name}: {what} (not private) and algo={algo} "
                                  f"is private; declare {keys} in the card")
            derive.append(view)
    return replace(card, raw=raw, notes=tuple(notes), derive=tuple(derive)) if wanted else card


def validate(cfg: DictConfig) -> RunConfig:
    eps = _number(cfg, "eps")
    if not (eps > 0) or math.isnan(eps):
        raise ConfigError(f"eps={eps!r} must be > 0 (eps=inf is the noise-free limit)")
    delta = _number(cfg, "delta")
    if not 0 <= delta < 1:
        raise ConfigError(f"delta={delta!r} must be in [0, 1)")
    seed = _number(cfg, "seed", int)
    if seed < 0:
        raise ConfigError(f"seed={seed} must be >= 0")
    device = str(cfg.get("device", "auto"))
    if device not in DEVICES:
        raise ConfigError(f"device={device!r} is unknown; allowed: {', '.join(DEVICES)}")
    if "algo" not in cfg or "name" not in cfg.algo:
        raise ConfigError("algo is not set: choose one with algo=<name> (see `privfair list`)")
    params = OmegaConf.to_container(cfg.algo, resolve=True)
    name = params.pop("name")
    plugin = registry.get(name)
    if plugin.Config is not None:
        params = typed(plugin.Config, params, "algo")
    if "data" not in cfg:
        raise ConfigError("data is not set: choose one with data=<name> (see `privfair list`)")
    card = validate_card(OmegaConf.to_container(cfg.data, resolve=True))
    check_compatible(name, plugin, params, card.raw)  # before the algorithm's own checks: the pair comes first
    if len(tabular.sensitive_columns(card.raw)) > 1 and plugin.kind not in GROUP_KINDS:
        raise ConfigError(f"data.sensitive={card.sensitive}: an intersection is measured on a classifier's "
                          f"predictions; algo={name} (kind {plugin.kind}) reads one sensitive attribute: name one")
    card = derive_views(name, plugin, params, card)
    if plugin.kind == "semi_supervised" and card.raw.get("unlabelled_size", AUTO) == AUTO:
        card = replace(card, unlabelled_size=DEFAULT_UNLABELLED)  # the derived unlabelled-pool view
    if card.unlabelled_size > 0 and plugin.kind != "semi_supervised":
        raise ConfigError(f"algo={name} (kind {plugin.kind}) cannot run on data={card.name}: its "
                          f"data.unlabelled_size={card.unlabelled_size:g} hides labels, which only semi-supervised "
                          f"algorithms take; use data.unlabelled_size=0 or a card without a pool")
    accountant, conversion = _budget(cfg, plugin, params)
    delta, delta_source = _delta(delta, plugin, accountant)
    secure = _secure(cfg, plugin)
    mechanism = _section(cfg, "mechanism", ("name",), unknown_ok=True)
    mech = str(mechanism.get("name", "default"))
    if mech != "default" and mech not in plugin.mechanisms:
        allowed = ", ".join(plugin.mechanisms) or "none (non-private)"
        raise ConfigError(f"mechanism={mech} is not accepted by algo={name}; allowed: {allowed}")
    extra = sorted(set(mechanism) - {"name"})
    if extra:  # the group names the noise family only; calibrations are typed algorithm keys
        raise ConfigError(f"mechanism.{extra[0]} is not a key of mechanism; allowed: name (a calibration is an "
                          f"algorithm key, e.g. algo.calibration for relaxed_fm and adfc)")
    save_predictions = _flag(cfg, "save_predictions", True)
    return RunConfig(eps, delta, seed, device, _flag(cfg, "overwrite", False), name, params, card,
                     mech, save_predictions, accountant, conversion, delta_source, secure)


def _flag(cfg: DictConfig, key: str, default: bool) -> bool:
    """A boolean run key: true or false (Hydra's spellings, e.g. True, FALSE), nothing else (`overwrite=no` is
    not false, and a secure result is never replaced by a misspelt one)."""
    value = cfg.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} must be true or false")
    return value


def _section(cfg: DictConfig, group: str, allowed: tuple[str, ...], unknown_ok: bool = False) -> dict:
    """A mapping of the config, refusing null and (unless `unknown_ok`) keys it does not know (e.g.
    `+budget.neighbouring=...`); an absent group is empty."""
    section = cfg.get(group, {})
    if section is None:
        raise ConfigError(f"{group}=null: {group} must be a mapping with keys {', '.join(allowed)} (leave it out "
                          f"for the defaults)")
    section = OmegaConf.to_container(section, resolve=True) if OmegaConf.is_config(section) else section
    if not isinstance(section, dict):
        raise ConfigError(f"{group}={section!r} must be a mapping with keys {', '.join(allowed)}")
    unknown = sorted(set(section) - set(allowed))
    if unknown and not unknown_ok:
        raise ConfigError(f"{group}.{unknown[0]} is not a key of {group}; allowed: {', '.join(allowed)}")
    return section


def _budget(cfg: DictConfig, plugin, params) -> tuple[str, str]:
    """The run's accountant (the algorithm config's own `accountant`, else budget.accountant, else the plugin's
    default) and RDP conversion, checked before any data is read."""
    budget = _section(cfg, "budget", BUDGET_KEYS)
    own = params.get("accountant") if isinstance(params, dict) else getattr(params, "accountant", None)
    accountant = own or budget.get("accountant") or plugin.accountant
    if accountant not in ACCOUNTANTS:
        raise ConfigError(f"budget.accountant={accountant!r} is unknown; allowed: {', '.join(ACCOUNTANTS)}")
    conversion = budget.get("rdp_conversion") or "classic"
    if conversion not in RDP_CONVERSIONS:
        raise ConfigError(f"budget.rdp_conversion={conversion!r} is unknown; allowed: {', '.join(RDP_CONVERSIONS)}")
    return accountant, conversion


def _delta(delta: float, plugin, accountant: str) -> tuple[float, str]:
    """The delta a run uses and where it comes from (issue 12 item 1): the run's, else the algorithm's own
    default, else DEFAULT_DELTA when the guarantee needs a delta."""
    if delta > 0:
        return delta, "run"
    if plugin.default_delta:
        return float(plugin.default_delta), "algorithm"
    if plugin.needs_delta or accountant in ("zcdp", "rdp"):
        return DEFAULT_DELTA, "default"
    return delta, "run"


def _secure(cfg: DictConfig, plugin) -> bool:
    secure = _section(cfg, "privacy", PRIVACY_KEYS).get("secure", False)
    if not isinstance(secure, bool):
        raise ConfigError(f"privacy.secure={secure!r} must be true or false")
    if secure and plugin.own_noise:
        raise ConfigError(f"privacy.secure=true does not cover algo={plugin.name}: it draws {plugin.own_noise} "
                          "outside privfair's floating-point-safe samplers; run it without privacy.secure")
    return secure
