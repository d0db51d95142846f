"""Typed plugin configs: each plugin declares a frozen dataclass `Config` whose fields carry the types and the
allowed ranges of its hyperparameters; the defaults live in one place, `configs/algo/<name>.yaml`.

`typed(Config, values, prefix)` turns the composed `algo:` block into a `Config`, or raises `ConfigError` with one
line naming the key and what is allowed: unknown keys, missing keys, wrong types and out-of-range values all fail
here, in the prevalidation step, before any data is read or any noise drawn.

Supported annotations: `bool`, `int`, `float`, `str`, `Literal[...]`, unions of these (e.g.
`float | Literal["auto", "calibrate"]`), `X | None`, `list[T]` / `tuple[T, ...]`, `dict`. Ranges go in the field's
metadata with `bounds(gt=0)`, `bounds(ge=0, le=1)`, ...; cross-field rules in `__post_init__` (raise `ConfigError`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal

from privfair_cli.errors import ConfigError


def bounds(gt: float | None = None, ge: float | None = None, lt: float | None = None, le: float | None = None,
           **extra) -> dict:
    """Field metadata for a numeric range: `field(metadata=bounds(gt=0))`. Applies to each element of a list."""
    return {"bounds": {k: v for k, v in (("gt", gt), ("ge", ge), ("lt", lt), ("le", le)) if v is not None}} | extra


_OPS = {"gt": (lambda x, b: x > b, ">"), "ge": (lambda x, b: x >= b, ">="),
        "lt": (lambda x, b: x < b, "<"), "le": (lambda x, b: x <= b, "<=")}


def describe(tp) -> str:
    """A type annotation as a user reads it: `a number > 0 or one of auto, calibrate`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in args)
    if origin in (list, tuple):
        return f"a list of {describe(args[0])}" if args else "a list"
    if tp is type(None):
        return "null"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string", dict: "a mapping"}.get(
        tp, getattr(tp, "__name__", str(tp)))


def _range_text(rng: dict) -> str:
    return " and ".join(f"{_OPS[k][1]} {v:g}" for k, v in rng.items())


class _Mismatch(Exception):
    pass


_BAD = object()


def _as_int(v):
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) else _BAD


def _as_float(v):
    ok = isinstance(v, int | float) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))
    return float(v) if ok else _BAD


# scalar annotation -> the value as that type, or _BAD
_SCALARS = {
    bool: lambda v: v if isinstance(v, bool) else _BAD,
    int: _as_int,
    float: _as_float,
    str: lambda v: v if isinstance(v, str) else _BAD,
    dict: lambda v: v if isinstance(v, dict) else _BAD,
}


def _coerce(value, tp):
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if tp is type(None):
        if value is None:
            return None
        raise _Mismatch
    if origin is Literal:
        for a in args:
            if value == a and type(value) is type(a):
                return a
            if isinstance(a, str) and isinstance(value, str) and value == a:
                return a
        raise _Mismatch
    if origin in (typing.Union, types.UnionType):
        for a in sorted(args, key=lambda a: typing.get_origin(a) is not Literal):  # exact literals first
            try:
                return _coerce(value, a)
            except _Mismatch:
                continue
        raise _Mismatch
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise _Mismatch
        return type(value)(_coerce(v, args[0]) for v in value) if args else value
    if tp in _SCALARS:
        value = _SCALARS[tp](value)
        if value is _BAD:
            raise _Mismatch
        return value
    raise TypeError(f"unsupported config annotation {tp!r}")


def _check_range(value, rng: dict, key: str, given) -> None:
    for v in value if isinstance(value, list | tuple) else [value]:
        if isinstance(v, int | float) and not isinstance(v, bool):
            for op, bound in rng.items():
                if not _OPS[op][0](v, bound):
                    raise ConfigError(f"{key}={given!r} is out of range; allowed: {_range_text(rng)}")


def typed(config_cls: type, values: dict, prefix: str = "algo"):
    """Build `config_cls` from `values` (the composed config block, `name` removed), checking every key."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        allowed = ", ".join(sorted(fields)) or "none"
        raise ConfigError(f"{prefix}.{unknown[0]} is not a key of {prefix}; allowed: {allowed}")
    out = {}
    for name, f in fields.items():
        key = f"{prefix}.{name}"
        if name not in values:
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                continue
            raise ConfigError(f"{key} is missing (its default belongs in the config file of {prefix})")
        try:
            value = _coerce(values[name], hints[name])
        except _Mismatch:
            raise ConfigError(f"{key}={values[name]!r} is not allowed; expected {describe(hints[name])}") from None
        if "bounds" in f.metadata:
            _check_range(value, f.metadata["bounds"], key, values[name])
        out[name] = value
    return config_cls(**out)


@dataclasses.dataclass(frozen=True)
class NoParams:
    """The config of a plugin without hyperparameters."""
