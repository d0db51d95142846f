"""Config composition for `run`, `reproduce` and the in-process sweep: override parsing, Hydra composition,
validation of every swept value before anything runs, and the jobs of a sweep.

`job_config` composes once per combination of config groups (algo, data, ...) and substitutes the swept values,
instead of composing every job from scratch (the in-process sweep's speed comes from this cache).
"""

from __future__ import annotations

import copy
import itertools
from functools import lru_cache

from privfair_cli.config import canonical_overrides, config_dir, data_choice, group_options, searchpath_override
from privfair_cli.errors import ConfigError

GROUPS = ("data", "algo", "mechanism", "budget", "experiment")


def split_overrides(overrides: list[str]):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except Exception as err:  # hydra's parse errors carry a multi-line message
        raise ConfigError(f"cannot parse overrides: {str(err).strip().splitlines()[0]}") from None


def values(override) -> list[str]:
    if override.is_sweep_override():
        return [str(v) for v in override.sweep_string_iterator()]
    return [override.get_value_element_as_str()]


def prefix(override) -> str:
    """The key as typed, with its `+` / `~` / `++`."""
    return override.input_line.split("=", 1)[0]


def first_values(overrides: list[str]) -> list[str]:
    """Each override with the first of its swept values."""
    return [f"{prefix(ov)}={values(ov)[0]}" for ov in split_overrides(overrides)]


def compose(overrides: list[str], with_hydra: bool = False):
    """The config of `overrides` as Hydra composes it (older names and `data.recipe` as `canonical_overrides`)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(config_dir()), version_base=None):
            return hydra_compose("config", overrides=canonical_overrides(overrides) + searchpath_override(),
                                 return_hydra_config=with_hydra)
    except Exception as err:
        lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
        raise ConfigError(" ".join(lines[:2]) if lines else type(err).__name__) from None
    finally:
        GlobalHydra.instance().clear()


def with_sweeper_params(overrides: list[str]) -> list:
    """The parsed overrides plus the experiment's `hydra.sweeper.params` (command-line values win; a command-line
    `data.recipe` applies to the experiment's data), in their current names (`canonical_overrides`)."""
    parsed = split_overrides(overrides)
    firsts = [f"{prefix(ov)}={values(ov)[0]}" for ov in parsed  # the launcher is chosen later; a recipe needs its data
              if not ov.get_key_element().startswith(("hydra.launcher.", "data.recipe"))]
    params = compose(firsts, with_hydra=True).hydra.sweeper.get("params") or {}
    given = {ov.get_key_element().lstrip("+~") for ov in parsed}
    return split_overrides(canonical_overrides([ov.input_line for ov in parsed] +
                                               [f"{k}={v}" for k, v in params.items() if k not in given]))


def prevalidate(overrides: list[str], multirun: bool = False) -> list[str]:
    """Check group choices and every swept value (from the command line and, in a multirun, from the
    experiment's `hydra.sweeper.params`), composing and validating each variant; no data is read.

    Unknown group options and overrides that do not parse raise. So does a bad value in a single run, or in a
    sweep where no point is valid. In a sweep with some valid points, the bad values are returned instead
    (`key=value: problem`, one per value): their jobs fail and are recorded as failed, the others run."""
    from omegaconf import OmegaConf, open_dict

    from privfair_cli import schema

    parsed = with_sweeper_params(overrides) if multirun else split_overrides(canonical_overrides(overrides))
    for ov in parsed if not multirun else ():
        if ov.is_sweep_override():
            raise ConfigError(f"{ov.input_line} lists several values, which is a sweep: add -m (privfair run -m "
                              f"{ov.input_line} ...), or quote the value to pass it as text")
    base, swept = [], []  # swept: (index in base, key, [(line, typed value), ...]) for keys with several values
    for ov in parsed:
        key = ov.get_key_element().lstrip("+~")
        vals = values(ov)
        if key == "data":
            for v in vals:
                data_choice(v)  # a dataset, or <dataset>/<recipe>: a one-line error naming what is allowed
        elif key in GROUPS:
            options = group_options(key)
            for v in vals:
                if v not in options:
                    raise ConfigError(f"{key}={v!r} is unknown; allowed: {', '.join(options)}")
        if key.startswith("hydra"):
            continue
        base.append(f"{prefix(ov)}={vals[0]}")
        if len(vals) > 1:
            typed = list(ov.sweep_iterator()) if ov.is_sweep_override() else [ov.value()]
            swept.append((len(base) - 1, key, [(f"{prefix(ov)}={v}", t) for v, t in zip(vals, typed, strict=True)]))

    def problem(lines: list[str], key: str | None = None, value=None) -> str | None:
        try:
            if key is None or (key in GROUPS and "." not in key):
                cfg = compose(lines)  # a group choice changes the composition
            else:
                cfg = base_cfg.copy()  # a value: substitute it, no need to compose again
                with open_dict(cfg):
                    OmegaConf.update(cfg, key, value, merge=False)
            schema.validate(cfg)
        except ConfigError as err:
            return str(err)
        return None

    error = problem(base)
    for i, _key, options in (swept if error and multirun else ()):  # look for a valid point to vary around
        for line, _ in options[1:]:
            if problem(base[:i] + [line] + base[i + 1:]) is None:
                base[i], error = line, None
                break
        if error is None:
            break
    if error:
        raise ConfigError(error)
    base_cfg = compose(base)
    bad = []
    for i, key, options in swept:
        for line, value in options:
            if line != base[i] and (why := problem(base[:i] + [line] + base[i + 1:], key, value)):
                bad.append(f"{line}: {why}")
    return bad


def expand(overrides: list[str]) -> list[list[str]]:
    """Every job of a sweep (cartesian product of the swept values), as lists of `key=value` lines."""
    parsed = [ov for ov in with_sweeper_params(overrides) if not ov.get_key_element().startswith("hydra")]
    choices = [[f"{prefix(ov)}={v}" for v in values(ov)] for ov in parsed]
    return [list(job) for job in itertools.product(*choices)]


@lru_cache(maxsize=64)
def _composed(group_lines: tuple[str, ...]):
    return compose(list(group_lines))


def job_config(job: list[str]):
    """The config of one job: composed once per group combination, swept values substituted."""
    from omegaconf import OmegaConf, open_dict

    job = canonical_overrides(job)
    parsed = split_overrides(job)
    is_group = [ov.get_key_element().lstrip("+~") in GROUPS or ov.input_line.startswith("~") for ov in parsed]
    cfg = copy.deepcopy(_composed(tuple(line for line, g in zip(job, is_group, strict=True) if g)))
    with open_dict(cfg):
        for ov, g in zip(parsed, is_group, strict=True):
            if not g:
                key = ov.get_key_element().lstrip("+")
                if not ov.input_line.startswith("+") and OmegaConf.select(cfg, key, default="__missing__") == \
                        "__missing__":
                    raise ConfigError(f"Could not override '{key}'. To append to your config use +{ov.input_line}")
                OmegaConf.update(cfg, key, ov.value(), merge=False)
    return cfg
