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

Sensitive attributes and groups (`encode`, then the card-driven encoding of `datasets.encode`): `sensitive` names one
column or an intersection (a list, or names joined by `&`: `[sex, race]` is the column `sex&race`, whose values are
`Male&White`, ...; `read` adds it). Each distinct value present is a group, labelled `race=White` or
`sex=Male&race=White`, ordered by the attributes' documented levels (`levels`, `discrete`, `features.levels`), then
the rest sorted. The reference group is `privileged` (a value of the attribute, or for an intersection a value of one
of its attributes, then the largest group holding it, or a full `Male&White`), else (`privileged: null`) the largest
group of the table as loaded. The binary s of the Table (what training reads) is 1 on the reference group's rows.
`meta` carries `group_attribute`, `group_labels`, `group_reference` and each row's group `row_group`, and the
values of every sensitive attribute of the card (`sensitive` and `roles.protected`) as codes `row_attributes` with
`attribute_columns` and `attribute_levels`, for the saved predictions.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np

from privfair_cli import lazy
from privfair_cli.datasets import read_csv_strict
from privfair_cli.errors import DataError

pd = lazy.module("pandas")

FORMAT_KEYS = ("type", "sep", "quote", "skipinitialspace", "header", "columns", "skip_rows", "na_values",
               "missing", "types")
TYPES = {"int": "int64", "float": "float64", "str": None}
SEP = "&"  # joins the attributes of an intersection (data.sensitive=[sex, race] is the column sex&race)


def read(paths, card) -> pd.DataFrame:
    base = card.get("format") or {}
    frames = []
    for (_fname, spec), path in zip((card.get("files") or {}).items(), paths, strict=True):
        fmt = base | ((spec or {}).get("format") or {})
        frames.append(read_file(Path(path), fmt))
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    df = handle_missing(df, base.get("missing", "drop"), card["name"])
    df = with_types(df, base.get("types") or {}, card["name"])
    return with_intersection(derive(df, card.get("derive") or {}, card["name"]), card)


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


# ---------------------------------------------------------------------------------------------- sensitive groups
def sensitive_columns(card: dict) -> list[str]:
    """The attributes `sensitive` names: none, one, or an intersection (a list, or names joined by SEP)."""
    sens = card.get("sensitive")
    if sens is None or sens == "":
        return []
    names = [str(c) for c in sens] if isinstance(sens, list | tuple) else str(sens).split(SEP)
    return [c.strip() for c in names]


def known_levels(card: dict, col: str) -> list[str] | None:
    """The documented levels of `col` (the card's `discrete`, `levels` or `features.levels`), or None."""
    from privfair_cli.datasets import discrete_spec

    for levels in ((discrete_spec(card).get(col) or {}).get("levels"), (card.get("levels") or {}).get(col),
                   ((card.get("features") or {}).get("levels") or {}).get(col)):
        if levels:
            return [str(v) for v in levels]
    return None


def _values(df: pd.DataFrame, col: str) -> pd.Series:
    return df[col].astype(str).str.strip()


def with_intersection(df: pd.DataFrame, card: dict) -> pd.DataFrame:
    """`df` with the intersection column of the card's sensitive attributes (`sex&race`: `Male&White`, ...)."""
    cols = sensitive_columns(card)
    joined = SEP.join(cols)
    if len(cols) < 2 or joined in df.columns:
        return df
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DataError(f"dataset {card['name']!r}: sensitive column(s) {missing} not in the data; columns: "
                        f"{list(df.columns)}")
    df[joined] = _values(df, cols[0]).str.cat([_values(df, c) for c in cols[1:]], sep=SEP)
    return df


def _codes(df: pd.DataFrame, cols: list[str], card: dict) -> tuple[np.ndarray, list[list[str]]]:
    """Each row's level code per column (n x len(cols)) and each column's levels: documented first, then the
    other observed values in sorted (numeric for a numeric column) order."""
    from privfair_cli.datasets import _sorted_levels

    codes, levels = [], []
    for col in cols:
        values = _values(df, col)
        order = [v for v in known_levels(card, col) or [] if v in set(values)]
        order += [v for v in _sorted_levels(df[col]) if v not in set(order)]
        codes.append(values.map({v: i for i, v in enumerate(order)}).to_numpy(np.int64))
        levels.append(order)
    return np.column_stack(codes) if codes else np.zeros((len(df), 0), np.int64), levels


def _reference(card: dict, cols: list[str], levels: list[list[str]], groups: np.ndarray, sizes: np.ndarray) -> int:
    """The reference group (see the module docstring); a `privileged` value no group holds is a DataError."""
    priv = card.get("privileged")
    if priv is None:
        return int(np.argmax(sizes))
    values = [[levels[j][c] for j, c in enumerate(g)] for g in groups]
    parts = str(priv).strip().split(SEP)
    if len(cols) > 1 and len(parts) == len(cols):
        hits = [i for i, v in enumerate(values) if v == parts]
    else:
        hits = [i for i, v in enumerate(values) if str(priv).strip() in v]
    if not hits:
        seen = sorted(SEP.join(v) for v in values)
        raise DataError(f"data.privileged={priv!r} matches no row of {SEP.join(cols)} (its values: {', '.join(seen)}): "
                        f"name one of them, or data.privileged=null for the largest group")
    return max(hits, key=lambda i: (sizes[i], -i))


def group_label(cols: list[str], values: list[str]) -> str:
    """`race=White`, `sex=Male&race=White`."""
    return SEP.join(f"{c}={v}" for c, v in zip(cols, values, strict=True))


def encode(df: pd.DataFrame, card: dict):
    """The card-driven encoding (`datasets.encode`) with the binary s of the reference group and the groups of the
    sensitive attribute(s) in `meta` (module docstring)."""
    from privfair_cli import datasets as data_lib

    cols = sensitive_columns(card)
    if not cols:
        return data_lib.encode(df, card)
    data_lib._require(df, cols, card, "label/sensitive")
    df = with_intersection(df.reset_index(drop=True), card)
    codes, levels = _codes(df, cols, card)
    groups, row_group = np.unique(codes, axis=0, return_inverse=True)
    row_group = row_group.ravel()
    sizes = np.bincount(row_group, minlength=len(groups))
    ref = _reference(card, cols, levels, groups, sizes)
    ref_value = SEP.join(levels[j][c] for j, c in enumerate(groups[ref]))
    single = len(cols) == 1 and card.get("privileged") is not None  # today's coding, untouched
    table = data_lib.encode(df, card if single else card | {"sensitive": SEP.join(cols), "privileged": ref_value})
    carried = cols + [c for c in (card.get("roles") or {}).get("protected") or [] if c in df.columns and c not in cols]
    attr_codes, attr_levels = _codes(df, carried, card)
    table.meta |= {
        "group_attribute": SEP.join(cols),
        "group_labels": [group_label(cols, [levels[j][c] for j, c in enumerate(g)]) for g in groups],
        "group_reference": ref, "row_group": row_group.astype(np.int64),
        "attribute_columns": carried, "attribute_levels": attr_levels, "row_attributes": attr_codes}
    return table
