"""The generic loader: a tabular dataset described by its card alone (issue 12 item 6).

Each file of the card's `files:` is parsed as the card's `format:` block says (a file's own `format:` under
`files.<name>` overrides single keys), the files' rows are stacked in the card's order, rows with a missing value
are dropped, and the card's `derive:` columns are added. Every value is read as a string unless `format.types`
declares it a number; the card's `features` / `discrete` sections then encode the table (`datasets.encode`).

`format:` keys (all optional):
- `type`: `csv` | `arff` (default: `arff` for a `.arff` / `.arff.gz` file, else `csv`);
- `sep` (default `,`), `quote` (default `"`), `skipinitialspace` (default false): CSV dialect;
- `header`: whether the first line names the columns (default true);
- `columns`: the column names, required when `header: false`; with a header, the names it must hold;
- `skip_rows`: lines to skip before the header or data (default 0; e.g. `adult.test`'s first line);
- `na_values`: the markers of a missing value (default none: every value is data, `?` included);
- `missing`: `drop` (default: rows holding a missing value are left out) | `error`;
- `types`: `{column: int | float | str}` (default str; numbers sort numerically in the discrete view).
Compression (`.gz`, `.zip`, ...) follows the file name. ARFF files take their column names from `@attribute`
lines, `?` as the missing-value marker and `'` as the quote character.

`derive:` adds or replaces columns, in order: `{new: {from: col, map: {raw: value}, default: value}}` (values
not in `map` keep their own value unless `default` is given) or `{new: {from: col, cut: [edges], labels: [..]}}`
(numeric column, intervals (edges[i], edges[i+1]], `.inf` allowed).
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import pandas as pd

from privfair_cli.datasets import read_csv_strict
from privfair_cli.errors import DataError

FORMAT_KEYS = ("type", "sep", "quote", "skipinitialspace", "header", "columns", "skip_rows", "na_values",
               "missing", "types")
TYPES = {"int": "int64", "float": "float64", "str": None}


def read(paths, card) -> pd.DataFrame:
    base = card.get("format") or {}
    frames = []
    for (_fname, spec), path in zip((card.get("files") or {}).items(), paths, strict=True):
        fmt = base | ((spec or {}).get("format") or {})
        frames.append(read_file(Path(path), fmt))
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    df = handle_missing(df, base.get("missing", "drop"), card["name"])
    df = with_types(df, base.get("types") or {}, card["name"])
    return derive(df, card.get("derive") or {}, card["name"])


def file_type(path: Path, fmt: dict) -> str:
    if fmt.get("type"):
        return fmt["type"]
    return "arff" if path.name.lower().removesuffix(".gz").endswith(".arff") else "csv"


def read_file(path: Path, fmt: dict) -> pd.DataFrame:
    if file_type(path, fmt) == "arff":
        return read_arff(path, fmt)
    header, columns = fmt.get("header", True), fmt.get("columns")
    if not header and not columns:
        raise DataError(f"{path}: format.header is false, so the card must name the columns (format.columns)")
    df = read_csv_strict(
        path, expected_cols=len(columns) if columns else None, sep=fmt.get("sep", ","),
        quotechar=fmt.get("quote", '"'), skipinitialspace=bool(fmt.get("skipinitialspace", False)),
        header=0 if header else None, names=None if header else list(columns),
        skiprows=int(fmt.get("skip_rows", 0)), na_values=list(fmt.get("na_values") or []), keep_default_na=False,
        dtype=str)
    if header and columns and list(df.columns) != list(columns):
        raise DataError(f"{path}: header {list(df.columns)} differs from the card's format.columns {list(columns)}")
    return df


def read_arff(path: Path, fmt: dict) -> pd.DataFrame:
    """An ARFF file: `@attribute` names, then the `@data` section as CSV (`%` comments, `?` missing)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    names, start = [], None
    for i, line in enumerate(lines):
        words = line.strip().split(None, 2)
        if not words or words[0].startswith("%"):
            continue
        if words[0].lower() == "@attribute" and len(words) > 1:
            names.append(words[1].strip("'\""))
        elif words[0].lower() == "@data":
            start = i + 1
            break
    if start is None or not names:
        raise DataError(f"{path}: not an ARFF file (no @attribute lines or no @data section)")
    data = "\n".join(ln for ln in lines[start:] if ln.strip() and not ln.lstrip().startswith("%"))
    return read_csv_strict(io.StringIO(data), expected_cols=len(names), name=str(path), line_offset=start,
                           header=None, names=names, quotechar="'", skipinitialspace=True,
                           na_values=list(fmt.get("na_values") or ["?"]), keep_default_na=False, dtype=str)


def handle_missing(df: pd.DataFrame, how: str, name: str) -> pd.DataFrame:
    holes = df.isna().any(axis=1)
    if not holes.any():
        return df
    if how == "error":
        row = int(np.flatnonzero(holes.to_numpy())[0])
        col = df.columns[df.iloc[row].isna().to_numpy()][0]
        raise DataError(f"dataset {name!r}: row {row + 1} has a missing {col} (format.missing: error)")
    return df[~holes].reset_index(drop=True)


def with_types(df: pd.DataFrame, types: dict, name: str) -> pd.DataFrame:
    for col, kind in types.items():
        if col not in df.columns:
            raise DataError(f"dataset {name!r}: format.types names {col!r}, not a column: {list(df.columns)}")
        if TYPES[kind] is None:
            continue
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna() | ((values % 1 != 0) if kind == "int" else False)
        if bad.any():
            what = "an integer" if kind == "int" else "a number"
            raise DataError(f"dataset {name!r}: column {col} holds {df[col][bad].iloc[0]!r}, not {what} (format.types)")
        df[col] = values.astype(TYPES[kind])
    return df


def derive(df: pd.DataFrame, spec: dict, name: str) -> pd.DataFrame:
    for new, how in spec.items():
        src = how["from"]
        if src not in df.columns:
            raise DataError(f"dataset {name!r}: derive.{new} reads column {src!r}, not in the data")
        if "map" in how:
            raw = df[src].astype(str).str.strip()
            mapped = raw.map({str(k): str(v) for k, v in how["map"].items()})
            df[new] = mapped.fillna(str(how["default"]) if "default" in how else raw)
        else:
            x = pd.to_numeric(df[src], errors="coerce")
            cut = pd.cut(x, [float(e) for e in how["cut"]], labels=[str(lb) for lb in how["labels"]])
            if cut.isna().any():
                bad = df[src][cut.isna()].iloc[0]
                raise DataError(f"dataset {name!r}: derive.{new}: {src}={bad!r} lies outside the cut edges")
            df[new] = cut.astype(str)
    return df
