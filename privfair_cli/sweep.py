"""Override handling shared by `run` and `reproduce`: config composition, validation of every swept value
before anything runs, and the in-process sweep `reproduce` uses.

`run_inprocess` executes a sweep without Hydra's launcher: it composes the config once per combination of config
groups (algo, data, ...) and substitutes the swept values, instead of composing every job from scratch. Its run
folders, `.hydra/overrides.yaml` records and resume behaviour are those of `privfair run -m` with the same sweep
directory, so either can continue what the other started.
"""

from __future__ import annotations

import copy
import itertools
import os
from functools import lru_cache
from pathlib import Path

from privfair_cli.errors import ConfigError

GROUPS = ("data", "algo", "mechanism", "budget", "experiment")
# Keys kept out of the `<other swept keys>` folder level (they have levels of their own); as in config.yaml.
DIRNAME_EXCLUDE = {"algo", "data", "eps", "seed", "device", "overwrite", "experiment"}


def config_dir() -> Path:
    env = os.environ.get("PRIVFAIR_CONFIG_DIR")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "configs"


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


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


def compose(overrides: list[str], with_hydra: bool = False):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(config_dir()), version_base=None):
            return hydra_compose("config", overrides=overrides, return_hydra_config=with_hydra)
    except Exception as err:
        lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
        raise ConfigError(" ".join(lines[:2]) if lines else type(err).__name__) from None
    finally:
        GlobalHydra.instance().clear()


def with_sweeper_params(overrides: list[str]) -> list:
    """The parsed overrides plus the experiment's `hydra.sweeper.params` (command-line values win)."""
    parsed = split_overrides(overrides)
    firsts = [f"{_prefix(ov)}={values(ov)[0]}" for ov in parsed]
    params = compose(firsts, with_hydra=True).hydra.sweeper.get("params") or {}
    given = {ov.get_key_element().lstrip("+~") for ov in parsed}
    return parsed + split_overrides([f"{k}={v}" for k, v in params.items() if k not in given])


def _prefix(ov) -> str:
    return ov.input_line.split("=", 1)[0]


def prevalidate(overrides: list[str], multirun: bool = False) -> None:
    """Check group choices and every swept value (from the command line and, in a multirun, from the
    experiment's `hydra.sweeper.params`), composing and validating each variant; no data is read."""
    from omegaconf import OmegaConf, open_dict

    from privfair_cli import schema

    parsed = with_sweeper_params(overrides) if multirun else split_overrides(overrides)
    base, variants = [], []
    for ov in parsed:
        key = ov.get_key_element().lstrip("+~")
        vals = values(ov)
        if key in GROUPS:
            options = group_options(key)
            for v in vals:
                if v not in options:
                    raise ConfigError(f"{key}={v!r} is unknown; allowed: {', '.join(options)}")
        if key.startswith("hydra"):
            continue
        prefix = _prefix(ov)
        base.append(f"{prefix}={vals[0]}")
        if len(vals) > 1:
            typed = list(ov.sweep_iterator()) if ov.is_sweep_override() else [ov.value()]
            variants += [(len(base) - 1, key, f"{prefix}={v}", t) for v, t in zip(vals[1:], typed[1:], strict=True)]
    base_cfg = compose(base)
    schema.validate(base_cfg)
    for i, key, line, value in variants:
        if key.split(".")[0] in GROUPS and "." not in key:
            cfg = compose(base[:i] + [line] + base[i + 1:])  # a group choice changes the composition
        else:
            cfg = base_cfg.copy()  # a value: substitute it, no need to compose again
            with open_dict(cfg):
                OmegaConf.update(cfg, key, value, merge=False)
        schema.validate(cfg)


# ------------------------------------------------------------------------------------------ in-process sweep
def expand(overrides: list[str]) -> list[list[str]]:
    """Every job of a sweep (cartesian product of the swept values), as lists of `key=value` lines."""
    parsed = [ov for ov in with_sweeper_params(overrides) if not ov.get_key_element().startswith("hydra")]
    choices = [[f"{_prefix(ov)}={v}" for v in values(ov)] for ov in parsed]
    return [list(job) for job in itertools.product(*choices)]


@lru_cache(maxsize=64)
def _composed(group_lines: tuple[str, ...]):
    return compose(list(group_lines))


def job_config(job: list[str]):
    """The config of one job: composed once per group combination, swept values substituted."""
    from omegaconf import OmegaConf, open_dict

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


def run_dir_of(sweep_dir: Path, cfg, job: list[str]) -> Path:
    """`<sweep dir>/<algo>/<data>/eps=<eps>/<other swept keys>/seed=<seed>`, as `hydra.sweep.subdir` names it."""
    lines = sorted(ov.input_line for ov in split_overrides(job)
                   if ov.get_key_element().lstrip("+~") not in DIRNAME_EXCLUDE)
    return Path(sweep_dir) / str(cfg.algo.name) / str(cfg.data.name) / f"eps={cfg.eps}" / ",".join(lines) / \
        f"seed={cfg.seed}"


def run_inprocess(overrides: list[str], sweep_dir: Path, log=print) -> int:
    from privfair_cli import results, runner

    prevalidate(overrides, multirun=True)
    jobs = expand(overrides)
    for i, job in enumerate(jobs, 1):
        cfg = job_config(job)
        run_dir = run_dir_of(sweep_dir, cfg, job)
        messages: list[str] = []
        record = runner.run(cfg, run_dir, log=messages.append)
        done = any(m.startswith("skip") for m in messages)
        for m in messages:
            if m.startswith("re-running"):
                log(m)
        if not done:
            results.atomic_write(run_dir / ".hydra" / "overrides.yaml", "".join(f"- {line}\n" for line in job))
        log(f"[{i}/{len(jobs)}] {'skip ' if done else ''}{summary_line(record)}")
    return len(jobs)


def summary_line(record: dict) -> str:
    """One line per run for sweeps: identity and the main metrics of its task kind."""
    m = record["metrics"]
    shown = " ".join(f"{k}={m[k]:.4f}" for k in ("accuracy", "risk_difference", "tvd_2way", "edge_tdr")
                     if m.get(k) is not None)
    return f"{record['algo']} {record['data']} eps={record['eps']:g} seed={record['seed']}: {shown}"
