"""Typed run configuration. `validate(cfg)` turns the composed Hydra config into these dataclasses or raises
`ConfigError` with a one-line message naming the bad key and what is allowed. It reads no data."""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from privfair_cli import registry
from privfair_cli.errors import ConfigError
from privfair_cli.typed import typed

DEVICES = ("auto", "cpu", "cuda")


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
    mechanism: dict[str, Any]
    budget: dict[str, Any]


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
    name = card.get("name")
    if not name or not card.get("loader"):
        raise ConfigError("data: a dataset card needs `name` and `loader`")
    try:
        module = importlib.import_module(f"privfair_cli.datasets.{card['loader']}")
    except ModuleNotFoundError:
        raise ConfigError(f"data.loader={card['loader']!r} for dataset {name!r} is not a loader module") from None
    synthetic = hasattr(module, "generate")
    if hasattr(module, "validate"):  # loader-specific card keys (e.g. graphs.py)
        module.validate(card)
    if not synthetic:
        if not card.get("label"):
            raise ConfigError(f"data.label is missing for dataset {name!r}: name the label column")
        if "sensitive" not in card:
            raise ConfigError(
                f"data.sensitive is missing for dataset {name!r}: name the sensitive column (or null for none)"
            )
        if card.get("sensitive") and card.get("privileged") is None:
            raise ConfigError(f"data.privileged is missing for dataset {name!r}: which value of "
                              f"{card['sensitive']} is coded s=1")
    n = card.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise ConfigError(f"data.n={n!r} must be a non-negative integer sample size (or null for all rows)")
    test_size = card.get("test_size", 0.2)
    if not isinstance(test_size, int | float) or not 0 <= test_size < 1:
        raise ConfigError(f"data.test_size={test_size!r} must be in [0, 1)")
    return DataCard(name, card["loader"], card.get("label"), card.get("sensitive"), n, float(test_size),
                    card.get("expected_d"), bool(card.get("allow_d_mismatch", False)), card)


def validate(cfg: DictConfig) -> RunConfig:
    eps = _number(cfg, "eps")
    if not (eps > 0) or math.isnan(eps):
        raise ConfigError(f"eps={eps!r} must be > 0 (use a large value, e.g. eps=1e6, for the noise-free limit)")
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
    if delta == 0 and plugin.default_delta:
        delta = float(plugin.default_delta)  # the algorithm's own delta when the run does not set one
    if plugin.needs_delta and delta == 0:
        raise ConfigError(f"algo={name} gives (eps, delta)-DP: set delta > 0 (e.g. delta=1e-5)")
    mechanism = OmegaConf.to_container(cfg.get("mechanism") or {}, resolve=True)
    mech = mechanism.get("name", "default")
    if mech != "default" and mech not in plugin.mechanisms:
        allowed = ", ".join(plugin.mechanisms) or "none (non-private)"
        raise ConfigError(f"mechanism={mech} is not accepted by algo={name}; allowed: {allowed}")
    extra = sorted(set(mechanism) - {"name"})
    if extra:  # the group names the noise family only; calibrations are typed algorithm keys
        raise ConfigError(f"mechanism.{extra[0]} is not a key of mechanism; allowed: name (a calibration is an "
                          f"algorithm key, e.g. algo.calibration for relaxed_fm and adfc)")
    if "data" not in cfg:
        raise ConfigError("data is not set: choose one with data=<name> (see `privfair list`)")
    card = validate_card(OmegaConf.to_container(cfg.data, resolve=True))
    if (plugin.kind == "embedding") != (card.loader == "graphs"):
        what = "a graph" if plugin.kind == "embedding" else "a tabular"
        raise ConfigError(f"algo={name} needs {what} dataset, data={card.name} is not one; allowed: "
                          f"{'cora, citeseer, wiki' if plugin.kind == 'embedding' else 'any non-graph card'}")
    budget = OmegaConf.to_container(cfg.get("budget") or {}, resolve=True)
    return RunConfig(eps, delta, seed, device, bool(cfg.get("overwrite", False)), name, params, card,
                     mechanism, budget)
