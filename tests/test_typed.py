"""Typed plugin configs: unknown keys, missing keys, wrong types and ranges fail in one line naming the key."""

import re
from dataclasses import dataclass, field
from typing import Literal

import pytest

from privfair_cli.errors import ConfigError
from privfair_cli.typed import bounds, typed


@dataclass(frozen=True)
class Example:
    alpha: float = field(metadata=bounds(ge=0))
    epochs: int | Literal["auto"] = field(metadata=bounds(gt=0))
    sigma: float | Literal["auto", "calibrate"] = field(metadata=bounds(gt=0))
    mode: Literal["abs", "linear"]
    flag: bool
    sizes: list[int] = field(metadata=bounds(gt=0))
    name: str | None = None


GOOD = {"alpha": 1, "epochs": "auto", "sigma": 0.5, "mode": "abs", "flag": True, "sizes": [1, 2]}


def test_good_values_are_coerced():
    cfg = typed(Example, GOOD)
    assert cfg.alpha == 1.0 and isinstance(cfg.alpha, float) and cfg.epochs == "auto" and cfg.name is None
    assert typed(Example, GOOD | {"epochs": 3.0}).epochs == 3
    assert typed(Example, GOOD | {"sigma": "calibrate"}).sigma == "calibrate"


@pytest.mark.parametrize("key, value, fragment", [
    ("alpha", "abc", "algo.alpha='abc' is not allowed; expected a number"),
    ("alpha", [1, 2], "algo.alpha=[1, 2] is not allowed"),
    ("alpha", -1, "algo.alpha=-1 is out of range; allowed: >= 0"),
    ("epochs", 0, "algo.epochs=0 is out of range; allowed: > 0"),
    ("epochs", 2.5, "expected an integer or one of auto"),
    ("sigma", "abc", "expected a number or one of auto, calibrate"),
    ("mode", "quadratic", "expected one of abs, linear"),
    ("flag", "yes", "expected true/false"),
    ("sizes", [1, -5], "algo.sizes=[1, -5] is out of range"),
    ("sigmaa", 1, "algo.sigmaa is not a key of algo; allowed: alpha, epochs, flag, mode, name, sigma, sizes"),
])
def test_bad_values_name_the_key(key, value, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        typed(Example, GOOD | {key: value})


def test_missing_key_without_default():
    with pytest.raises(ConfigError, match="algo.flag is missing"):
        typed(Example, {k: v for k, v in GOOD.items() if k != "flag"})
