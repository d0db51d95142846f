"""The `audit.*` options of `privfair audit` (`OPTIONS`: default and what is allowed), split from the run's Hydra
overrides, checked and typed."""

from __future__ import annotations

import math

from privfair_cli.errors import ConfigError

OPTIONS = {  # audit.<key>: (default, what is allowed)
    "trials": (1000, "an integer >= 20: releases per dataset (half pick the threshold, half measure)"),
    "confidence": (0.99, "a number in (0, 1)"),
    "canary": ("extreme", "extreme | row"),
    "rows": (300, "an integer >= 20: rows of the audited dataset D"),
    "mode": ("auto", "auto | distinguish | one_run"),
    "view": ("auto", "auto | release | output: what the distinguishing test reads (privfair_cli.tools.audit)"),
    "canaries": (1000, "an integer >= 10: canaries of the one-run audit"),
    "guess_fraction": (0.1, "a number in (0, 0.5]: share of canaries guessed in (and out) by the one-run audit"),
    "dirac_canaries": ("auto", "auto | an integer >= 10: Dirac gradient canaries of DP-SGD's white-box one-run audit "
                       "(at most one per parameter; auto: one per parameter, at most 1,000,000)"),
    "whitebox": ("on", "on | off: the white-box release checks (privfair_cli.tools.audit.whitebox) beside the test"),
    "whitebox_fits": (30, "an integer >= 1: traced fits whose draws the calibration check pools"),
    "seed": (0, "an integer >= 0"),
    "out": ("", "a folder for audit.json and histogram.png (default results/audit/<algo>/<data>/eps=<eps>)"),
}
CANARIES = ("extreme", "row")
MODES = ("auto", "distinguish", "one_run")
VIEWS = ("auto", "release", "output")


def defaults() -> dict:
    """Every option at its default."""
    return {k: v for k, (v, _) in OPTIONS.items()}


def options(items: list[str]) -> tuple[dict, list[str]]:
    """Split `audit.key=value` items (checked, typed) from the run's Hydra overrides."""
    opts = defaults()
    rest = []
    for item in items:
        if not item.startswith("audit."):
            rest.append(item)
            continue
        if "=" not in item:
            raise ConfigError(f"{item}: an audit option is audit.key=value; keys: {', '.join(OPTIONS)}")
        key, value = item[len("audit."):].split("=", 1)
        if key not in OPTIONS:
            raise ConfigError(f"audit.{key} is unknown; allowed: {', '.join('audit.' + k for k in OPTIONS)}")
        opts[key] = _typed(key, value)
    return opts, rest


def _typed(key: str, value: str):
    allowed = OPTIONS[key][1]
    bad = ConfigError(f"audit.{key}={value!r} is invalid; allowed: {allowed}")
    if key == "out":
        if not value:
            raise bad
        return value
    if key in ("canary", "mode", "view", "whitebox"):
        if value not in {"canary": CANARIES, "mode": MODES, "view": VIEWS, "whitebox": ("on", "off")}[key]:
            raise bad
        return value
    if key == "dirac_canaries" and value == "auto":
        return value
    try:
        v = float(value) if key in ("confidence", "guess_fraction") else int(value)
    except ValueError:
        raise bad from None
    ok = {"trials": v >= 20, "rows": v >= 20, "canaries": v >= 10, "dirac_canaries": v >= 10, "seed": v >= 0,
          "whitebox_fits": v >= 1, "confidence": 0 < v < 1, "guess_fraction": 0 < v <= 0.5}[key]
    if not ok or (isinstance(v, float) and not math.isfinite(v)):
        raise bad
    return v
