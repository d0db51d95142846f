"""The one place that maps names to plugins. A plain dict, filled by `@register` in the algorithm modules."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privfair_cli.errors import ConfigError

TASK_KINDS = ("classifier", "generator", "graph", "embedding", "semi_supervised", "attack", "description")

# Modules under privfair_cli.algorithms whose import registers plugins (torch-free ones first).
ALGORITHM_MODULES = ("describe", "logistic", "functional", "prefair", "causal", "dpne", "fes", "crfs", "ffpdg",
                     "dpsgd", "fairgan", "adv_debias", "early_stopping", "adv_fairness", "cfgan", "fair_ssl", "zafar")


GUARANTEES = ("eps-DP", "(eps,delta)-DP", "zCDP", "heuristic", "none")

ENUMERABLE_CELLS = 100_000  # the largest discrete domain the `enumerable` view admits (card keys alone)
ONEHOT_WIDTH = 10_000  # the widest one-hot record the `onehot` view admits (FairGAN family; Adult's is 57)

# What a plugin may need from a dataset (its `needs`), and the card keys that provide each (schema.card_views
# derives a card's views from its keys without reading data; the run refuses a pair before loading anything).
VIEWS = {
    "label": ("a label column", "`label`"),
    "binary_label": ("a binary label", "`positive`: the label values coded 1"),
    "sensitive": ("a sensitive attribute (its groups; s = 1 the reference group)", "`sensitive`, with `privileged` "
                  "naming the reference group (else the largest; docs/groups.md)"),
    "features": ("a classifier view scaled into [0, 1] by declared bounds",
                 "`features`: numeric bounds, onehot and binary columns"),
    "numeric": ("numeric columns", "`features`"),
    "discrete": ("a discrete view (integer codes over a declared domain)",
                 "`discrete`, or `features` to derive it from"),
    "roles": ("fairness roles", "`roles`: protected, admissible, outcome"),
    "graph_reference": ("a declared reference graph (without one, a discrete card's reference is non-private PC)",
                        "`graph_reference: pc` (non-private PC on the same rows), or a loader that draws the DAG"),
    "network": ("a network (vertices, edges)", "`loader: graphs` with `edges` and `labels` files"),
    "unlabelled_pool": ("an unlabelled pool", "`unlabelled_size`: the fraction of rows whose labels are hidden; "
                        "auto (every labelled card) hides half for a semi-supervised algorithm"),
    "enumerable": (f"a discrete view of at most {ENUMERABLE_CELLS:,} cells (FairMaxEnt, RON-Gauss, LapMech)",
                   "`discrete`: `levels` or `bins` for every attribute, their product at most that; else derived from "
                   "the declared bounds and levels (`levels`, `views.enumerable`)"),
    "onehot": (f"a discrete view whose one-hot record (every attribute but s and y) is at most {ONEHOT_WIDTH:,} "
               "columns wide (FairGAN family)", "`discrete`: `levels` or `bins` for every attribute, their codes "
               "summing to at most that; else derived for a non-private algorithm (the widest attributes dropped)"),
    "causal_graph": ("a causal graph over binary nodes", "`loader: causal_tables` with a `causal_graph:` block; else "
                     "derived for a non-private algorithm (binarised nodes, graph learned by PC: `views.causal`)"),
    "tokens": ("bags of token ids with mean-pooling weights (text)", "`loader: imdb`"),
}
# A plugin that declares no `needs` gets its kind's.
KIND_NEEDS = {"classifier": ("label", "features"), "generator": ("discrete",),
              "graph": ("discrete|graph_reference",), "embedding": ("network",),
              "semi_supervised": ("label", "features", "sensitive", "unlabelled_pool"),
              "attack": ("label", "features", "sensitive"),
              "description": ()}  # describe: the sizes of any dataset, whatever views it provides


def option(cfg: Any, key: str, default: Any = None) -> Any:
    """`key` of a plugin config, whether a typed Config or a params dict (for `requirements`)."""
    return cfg.get(key, default) if isinstance(cfg, dict) else getattr(cfg, key, default)


class Plugin:
    """Base class of every algorithm plugin.

    A plugin declares `Config`, a frozen dataclass of its hyperparameters (types and ranges; `typed.py`), whose
    defaults live in `configs/algo/<name>.yaml`. It is built as `cls(cfg, mechanism)` from the validated config
    (`make(name, **overrides)` does that from the YAML defaults, for tests), then
    `fit(data, budget, ledger, rng, device)` is called once; `rng` is the run's `privacy.NoiseSource`, a numpy
    Generator whose privacy noise (through `privfair_cli.privacy.mechanisms`) is seeded or secure. A plugin that
    draws privacy noise with its own sampler names it in `own_noise` (secure mode is then refused) and takes its
    generator from `rng.own_noise_generator(...)`.
    `guarantee` is what a run of the plugin really gives (one of GUARANTEES); `claims()` may lower it for the
    configured instance (e.g. an option that drops the clipping the proof needs makes it `heuristic`). Task kinds add:
      classifier: `predict(X) -> {0,1}` array (and `predict_proba` where it exists);
      generator:  `sample(n, rng) -> pandas.DataFrame` with the input's discrete schema;
      graph:      attribute `adjacency` (p x p 0/1 skeleton) and `cpdag` after fit;
      embedding:  attribute `embedding` (n_vertices x k, rows in the graph's node order) after fit on a graph card.
      semi_supervised: as classifier; `fit` gets the training rows with y = -1 where the label is hidden
                  (`meta["row_labelled"]`, datasets.split), the protected attribute `s` on every row.
      attack:     `attack(test, rng) -> dict` after fit: select examples of the attacked set, perturb them, return
                  the fairness before / after (adv_fairness.md).
    `extra_metrics()` may return the numbers a plugin computed while fitting (flat name -> number) for metrics.json.
    Test metrics come from evaluate.py only: the kind's evaluation, or the family evaluation a plugin names in
    `evaluation`, plus the metric sets it lists in `metric_sets` (evaluate.METRIC_SETS), e.g. the metrics its
    family's spec asks for; the plugin exposes what they read (predictions, its release, histories).
    `artifacts(folder)` may write small files (weights, graphs, curves) into the folder it is given: the run's
    `artifacts/`, swapped into the run folder with the rest of the result.
    `seed_batching`: the plugin can train several seeds as one model; in a seed group of a sweep (`seedbatch`) it
    is given `peer_noise` before `fit` ({run seed: that run's noise stream}, its own included) and sets
    `seeds_batched` (the run seeds it trained together, [] when alone).
    `needs` names the dataset views (VIEWS) the plugin reads, `a|b` for either; `requirements(cfg)` may refine
    them for a configured instance. The run checks them against the card before any data is read.
    """

    name: ClassVar[str]
    kind: ClassVar[str]
    mechanisms: ClassVar[tuple[str, ...]] = ()
    needs_delta: ClassVar[bool] = False
    cuda: ClassVar[bool] = False
    private: ClassVar[bool] = True
    accountant: ClassVar[str] = "basic"
    default_delta: ClassVar[float] = 0.0  # delta used when the run leaves delta=0 (e.g. 1e-9 for MST-style zCDP)
    guarantee: ClassVar[str] = "eps-DP"
    guarantee_note: ClassVar[str] = ""  # which settings change the guarantee (docs/privacy.md, `privfair list`)
    own_noise: ClassVar[str] = ""  # noise drawn outside privfair_cli.privacy (e.g. "torch noise"): no secure mode
    Config: ClassVar[type | None] = None  # None: a plugin not yet converted to a typed config (takes **params)
    needs: ClassVar[tuple[str, ...]] = ()  # dataset views (VIEWS; "a|b" = either); () = KIND_NEEDS[kind]
    seed_batching: ClassVar[bool] = False  # trains a sweep's seeds as one model (seedbatch; `peer_noise` given)
    evaluation: ClassVar[str | None] = None  # a family evaluation of evaluate.EVALUATORS; None: the kind's
    metric_sets: ClassVar[tuple[str, ...]] = ()  # what the family adds to it (evaluate.METRIC_SETS)

    def __init__(self, cfg: Any = None, mechanism: dict | None = None, **params: Any):
        if self.Config is None:
            self.params = params | ({} if cfg is None else dict(cfg))
        else:
            if params:
                raise TypeError(f"{self.name}: pass a {self.Config.__name__}, not keyword parameters")
            self.cfg = cfg if cfg is not None else self.Config()
        self.mechanism = dict(mechanism or {})

    @classmethod
    def requirements(cls, cfg: Any = None) -> tuple[str, ...]:
        """The views a configured instance needs (`cfg`: its typed Config, or the params dict)."""
        return cls.needs or KIND_NEEDS[cls.kind]

    def claims(self) -> str:
        """The guarantee this configured instance gives (one of GUARANTEES)."""
        return self.guarantee if self.private else "none"

    def claim(self) -> str:
        """What the fitted run may claim: `claims()`, lowered to heuristic by an understated sensitivity."""
        claim = self.claims()
        return "heuristic" if claim not in ("none", "heuristic") and self.__dict__.get("_understated") else claim

    def understated(self, key: str, value: float, derived: float, source: str) -> None:
        """A user-set sensitivity `algo.<key>` below the bound the family derives (`derived`, from `source` and the
        card's declared ranges): the noise is too small for the claim, so the run's guarantee becomes
        `heuristic` (`runner.guarantee`) and the run warns with the derived bound beside it."""
        if value < derived:
            self._understated = True
            self.warn(f"algo.{key}={value:g} is below the derived bound {derived:.6g} ({source}): the noise is "
                      f"{derived / value:.3g}x too small for a DP claim; the guarantee is heuristic")

    def warn(self, message: str) -> None:
        """Record a premise that failed for this run (of the guarantee or of the metrics): the runner writes each
        message to the result's `warnings` and `privfair run` prints it."""
        self.__dict__.setdefault("_warnings", []).append(str(message))

    def warnings(self) -> list[str]:
        return list(self.__dict__.get("_warnings", []))

    def fit(self, data, budget, ledger, rng: np.random.Generator, device: str = "cpu") -> Plugin:
        raise NotImplementedError

    def extra_metrics(self) -> dict[str, float]:
        return {}

    def artifacts(self, run_dir) -> None:
        return None


@dataclass(frozen=True)
class PluginInfo:
    name: str
    kind: str
    mechanisms: tuple[str, ...]
    needs_delta: bool
    cuda: bool
    private: bool
    module: str
    needs: tuple[str, ...]


ALGORITHMS: dict[str, type[Plugin]] = {}


def register(cls: type[Plugin]) -> type[Plugin]:
    if cls.kind not in TASK_KINDS:
        raise ValueError(f"plugin {cls.name}: kind must be one of {TASK_KINDS}")
    unknown = [v for need in cls.needs for v in need.split("|") if v not in VIEWS]
    if unknown:
        raise ValueError(f"plugin {cls.name}: needs {unknown}, not dataset views; known: {', '.join(VIEWS)}")
    if cls.name in ALGORITHMS and ALGORITHMS[cls.name] is not cls:
        raise ValueError(f"plugin name {cls.name!r} registered twice")
    ALGORITHMS[cls.name] = cls
    return cls


def variants(base: type[Plugin], module: str, **docs: str) -> list[type[Plugin]]:
    """Register one plugin per `name=docstring`, each `base` under that name (the configurations of one model that
    differ only in what `base` reads off `self.name`), as if declared in `module`."""
    import sys

    out = []
    for name, doc in docs.items():
        cls = register(type("".join(p.title() for p in name.split("_")), (base,),
                            {"name": name, "__doc__": doc, "__module__": module}))
        setattr(sys.modules[module], cls.__name__, cls)  # importable by name (pickling) like a declared class
        out.append(cls)
    return out


def load_plugins(until: str | None = None) -> dict[str, type[Plugin]]:
    """Import the algorithm modules, in order; with `until`, stop once that algorithm is registered (a run of
    the logistic family never imports torch, which only the DP-SGD module needs)."""
    for mod in ALGORITHM_MODULES:
        if until in ALGORITHMS:
            break
        try:
            importlib.import_module(f"privfair_cli.algorithms.{mod}")
        except ModuleNotFoundError as err:
            if err.name != f"privfair_cli.algorithms.{mod}":
                raise
    return ALGORITHMS


def get(name: str) -> type[Plugin]:
    plugins = load_plugins(until=name)
    if name not in plugins:
        raise ConfigError(f"algo={name!r} is not a registered algorithm; allowed: {', '.join(sorted(plugins))}")
    return plugins[name]


def defaults(name: str) -> dict:
    """The hyperparameters of `configs/algo/<name>.yaml` (without `name`), over those of the files its
    `defaults:` list names before `_self_` (e.g. `sgd.yaml`: `defaults: [dpsgd, _self_]`), as Hydra composes them."""
    from omegaconf import OmegaConf

    from privfair_cli.config import config_dir, find_config

    path = find_config("algo", name) or config_dir() / "algo" / f"{name}.yaml"
    own = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    params = {}
    for parent in own.pop("defaults", None) or []:
        if parent != "_self_":
            params |= defaults(parent)
    own.pop("name", None)
    return params | own


def make(name: str, mechanism: dict | None = None, **overrides: Any) -> Plugin:
    """A plugin built from its YAML defaults with `overrides`, validated as a run would validate it."""
    from privfair_cli.typed import typed

    cls = get(name)
    params = defaults(name) | overrides
    if cls.Config is None:
        return cls(mechanism=mechanism or {}, **params)
    return cls(typed(cls.Config, params), mechanism or {})


GENERAL_GUARANTEE_RULES = (
    "eps=inf (the noise-free limit): none",
    "an eps-DP algorithm whose ledger composes to a delta > 0 (zcdp or rdp accountant): (eps,delta)-DP",
    "a user-set sensitivity below the bound the family derives: heuristic, with the bound in the run's warnings",
)


def guarantee_at_defaults(cls: type[Plugin]) -> str:
    """The guarantee a run of `cls` claims with its YAML defaults (before the run's own settings)."""
    return make(cls.name).claims() if cls.private else "none"


def info(cls: type[Plugin]) -> PluginInfo:
    return PluginInfo(cls.name, cls.kind, tuple(cls.mechanisms), cls.needs_delta, cls.cuda, cls.private,
                      cls.__module__.rsplit(".", 1)[-1], cls.requirements())
