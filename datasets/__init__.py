"""Dataset loading: file resolution, checksums, parse caching, and the card-driven encoding.

A dataset is described by its card (`configs/data/<name>.yaml`). A tabular dataset needs nothing else: the
generic loader (`tabular.py`) reads its CSV or ARFF files as the card's `format:` block says. A card names a
`loader` module in this package only for unusual formats: the module's `read(paths, card) -> DataFrame` (and/or
`encode(raw, card) -> Table`) replaces the generic one; synthetic cards name a module whose
`generate(card, rng) -> Table` draws the data. `load(card)` returns a `Table`:

- `X`, `y`, `s`: the classifier view (features encoded into [0, 1] using the card's *declared* bounds, so that
  sensitivities never depend on the private data), label, binary sensitive attribute (1 = `privileged`);
- `frame`, `domain`, `roles`: the discrete view (integer codes per attribute) used by generators and graph
  learners: the card's `discrete:` section, or derived from its declared `features` (`discrete_spec`);
- `meta["row_id"]`: each row's position in the table as loaded (kept through subsampling and splitting).

Files are looked up in the card's own `dir:` (a user card's folder: absolute, `~`, or relative to the working
directory), then `$PRIVFAIR_DATA_DIR/<subdir>/`, then `~/.cache/privfair/data/<subdir>/`, then downloaded
from the card's `url`. Every file's sha256 is checked against the card on every load (unless `verify: false`);
the digest is computed once per file per process (remembered by path, size, mtime and inode, in memory only).
Parsed tables are cached (`store.py`: npz + JSON, a format that cannot run code) under
`~/.cache/privfair/parsed/` (or `$PRIVFAIR_CACHE_DIR`), keyed by the card's parsing keys, the files' sha256
digests and the source of this package, so a `verify: false` run over a changed file never serves a default run,
and an edited loader never reads a stale parse.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import re
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypeVar

import numpy as np

from privfair_cli import lazy
from privfair_cli.datasets import store
from privfair_cli.errors import ConfigError, DataError
from privfair_cli.results import atomic_save

pd = lazy.module("pandas")

CACHE_VERSION = 3  # 3: the safe npz format of store.py (2 was a pickle)
T = TypeVar("T")
DEFAULT_LOADER = "tabular"
MAX_CODES = 100  # derived discrete view: a wider numeric range is cut into this many equal-width bins
MIN_ROWS = 30  # fewer train or test rows than this: the run says its metrics are not meaningful


@dataclass
class Table:
    name: str
    X: np.ndarray
    y: np.ndarray
    s: np.ndarray | None
    feature_names: list[str]
    frame: pd.DataFrame | None = None
    domain: dict[str, int] = field(default_factory=dict)
    roles: dict[str, list[str]] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.y)

    @property
    def d(self) -> int:
        return self.X.shape[1]

    def subset(self, idx) -> Table:
        idx = np.asarray(idx)
        return Table(
            name=self.name,
            X=self.X[idx],
            y=self.y[idx],
            s=None if self.s is None else self.s[idx],
            feature_names=self.feature_names,
            frame=None if self.frame is None else self.frame.iloc[idx].reset_index(drop=True),
            domain=self.domain,
            roles=self.roles,
            meta={k: v for k, v in self.meta.items() if not k.startswith("row_")}
            | {k: v[idx] for k, v in self.meta.items() if k.startswith("row_")},
        )


SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]*")


def safe_name(value, key: str) -> str:
    """`value` when it can name a folder or file (letters, digits, `_ . + = -`, no separator, no `..`), else a
    one-line ConfigError naming `key`: a card name becomes the run folder and the cache file's name."""
    text = str(value)
    if not SAFE_NAME.fullmatch(text) or ".." in text:
        raise ConfigError(f"{key}={text!r} cannot name a folder: use letters, digits and _ . + = - (no path "
                        f"separator, no '..')")
    return text


def loader_module(card: dict):
    return importlib.import_module(f"privfair_cli.datasets.{card.get('loader') or DEFAULT_LOADER}")


# ---------------------------------------------------------------------------------------------- files
def cache_root() -> Path:
    return Path(os.environ.get("PRIVFAIR_CACHE_DIR") or Path.home() / ".cache" / "privfair")


def write_cache(path: Path, save: Callable[[IO[bytes]], object]) -> None:
    """Write a cache file with `save(binary file)` atomically (`results.atomic_save`), so a reader never meets a
    partial one. A cache that cannot be written (read-only or full disk) is skipped: what it holds is recomputed
    next time; any other error is raised."""
    with contextlib.suppress(OSError):
        atomic_save(path, save)


def read_cache(path: Path, load: Callable[[Path], T]) -> T | None:
    """`load(path)`, or None when the file is absent; a file that fails to load (partial, stale, foreign) is
    removed and None returned: a cache is rebuilt, never trusted."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return load(path)
    except Exception:
        with contextlib.suppress(OSError):
            path.unlink()
        return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


_DIGESTS: dict[tuple, str] = {}


def file_digest(path: Path) -> str:
    """sha256 of a file, computed once per process for a given (path, size, mtime, inode)."""
    st = Path(path).stat()
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _DIGESTS:
        _DIGESTS[key] = _sha256(Path(path))
    return _DIGESTS[key]


def resolve_files(card: dict) -> list[Path]:
    """Paths of the card's files, downloading into the user cache when they are nowhere local."""
    subdir = card.get("subdir") or card["name"]
    dirs = [Path(card["dir"]).expanduser()] if card.get("dir") else []  # a user card's own folder, first
    if os.environ.get("PRIVFAIR_DATA_DIR"):
        base = Path(os.environ["PRIVFAIR_DATA_DIR"]).expanduser()
        dirs += [base / subdir, base]
    user = cache_root() / "data" / subdir
    dirs.append(user)
    paths, missing = [], []
    for fname, spec in (card.get("files") or {}).items():
        spec = spec or {}
        own = dirs if not spec.get("subdir") else [  # a file of another folder (e.g. a model the loader applies)
            d.parent / spec["subdir"] if d.name == subdir else d / spec["subdir"] for d in dirs]
        found = next((d / fname for d in own if (d / fname).is_file()), None)
        if found is None and spec.get("url"):
            found = _download(spec["url"], user / fname, spec.get("sha256"))
        if found is None:
            missing.append(fname)
        paths.append(found)
    if missing:
        where = " or ".join(dict.fromkeys(str(d) for d in (dirs[0], user)))
        raise DataError(
            f"dataset {card['name']!r} needs file(s) {', '.join(missing)}: none found and no download possible; "
            f"put them in {where} (or set PRIVFAIR_DATA_DIR to a folder holding {subdir}/)"
        )
    return paths


def _download(url: str, dest: Path, sha256: str | None) -> Path | None:
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=30) as resp, tempfile.NamedTemporaryFile(
            dir=dest.parent, delete=False
        ) as tmp:
            tmp.write(resp.read())
    except OSError:
        return None
    if sha256 and _sha256(Path(tmp.name)) != sha256:
        os.unlink(tmp.name)
        raise DataError(f"download of {url} does not match its sha256 {sha256}; refusing to use it")
    os.replace(tmp.name, dest)
    return dest


def hint(card: dict, key: str, value) -> str:
    """The override that sets the card key `key`, as a user types it: `data.key=value`, or `+data.key=value`
    when the composed card does not hold the key (Hydra refuses to override a key that does not exist)."""
    text = str(value).lower() if isinstance(value, bool) else value
    return f"{'' if key in card else '+'}data.{key}={text}"


def verify(card: dict, paths: list[Path]) -> list[str]:
    """The files' sha256 digests; a mismatch with the card is an error unless `verify: false`."""
    digests = [file_digest(p) for p in paths]
    if card.get("verify", True) is False:
        return digests
    for (fname, spec), path, got in zip((card.get("files") or {}).items(), paths, digests, strict=True):
        want = (spec or {}).get("sha256")
        if want and got != want:
            raise DataError(
                f"{path}: sha256 differs from the dataset card's (a different or truncated copy of {fname}); "
                f"replace the file or set {hint(card, 'verify', False)}"
            )
    return digests


# ---------------------------------------------------------------------------------------------- parsing
def read_csv_strict(path, expected_cols: int | None = None, name: str | None = None, line_offset: int = 0,
                    **kw) -> pd.DataFrame:
    """pandas.read_csv that names the file and line of any malformed row instead of padding it with NaN.
    `path` may be a buffer; `name` then names it in messages and `line_offset` counts the lines before it."""
    name = name or str(path)
    try:
        df = pd.read_csv(path, on_bad_lines="error", **kw)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        raise DataError(f"{name}: malformed file ({str(err).strip().splitlines()[-1]})") from None
    if expected_cols is not None and df.shape[1] != expected_cols:
        raise DataError(f"{name}: expected {expected_cols} columns, found {df.shape[1]}")
    last = df.iloc[:, -1]
    short = df.isna().all(axis=1) | last.isna() | (last == "")  # a short row is padded with NaN, or "" without NA
    if short.any():
        skip = kw.get("skiprows", 0) if isinstance(kw.get("skiprows", 0), int) else 0
        header = 0 if kw.get("header", "infer") is None else 1
        line = int(np.flatnonzero(short.to_numpy())[0]) + 1 + skip + header + line_offset
        raise DataError(f"{name}: line {line} is incomplete (truncated or missing fields)")
    return df


# card keys that do not change the parse (the `defaults` list only names where the others came from)
RUN_KEYS = ("n", "test_size", "unlabelled_size", "expected_d", "allow_d_mismatch", "verify", "rows", "defaults",
            "views")


def _source_digest() -> str:
    """sha256 of this package's source: a changed loader or encoding never reads an old parse."""
    if "source" not in _DIGESTS:
        h = hashlib.sha256()
        for path in sorted(Path(__file__).parent.glob("*.py")):
            h.update(path.name.encode() + path.read_bytes())
        _DIGESTS["source"] = h.hexdigest()
    return _DIGESTS["source"]


def _cache_key(card: dict, digests: list[str]) -> str:
    parse = {k: v for k, v in card.items() if k not in RUN_KEYS}
    blob = json.dumps([CACHE_VERSION, _source_digest(), parse, digests], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def load(card: dict, rng: np.random.Generator | None = None) -> Table:
    """The dataset a card describes: generated (synthetic cards) or read, encoded and cached."""
    module = loader_module(card)
    if hasattr(module, "generate"):
        table = module.generate(card, rng if rng is not None else np.random.default_rng(card.get("data_seed", 0)))
        return _with_row_ids(table)
    paths = resolve_files(card)
    digests = verify(card, paths)
    cache = cache_root() / "parsed" / f"{safe_name(card['name'], 'data.name')}-{_cache_key(card, digests)}.npz"
    table = read_cache(cache, store.load)
    if table is None:
        from privfair_cli.datasets import tabular

        raw = getattr(module, "read", tabular.read)(paths, card)
        table = _with_row_ids(getattr(module, "encode", tabular.encode)(raw, card))  # groups in meta (tabular)
        with contextlib.suppress(TypeError):  # a table holding what store.py cannot write safely is not cached
            write_cache(cache, lambda f: store.save(table, f))
    check_rows(table, card)
    check_groups(table, card)
    return table


def _with_row_ids(table: Table) -> Table:
    if "row_id" not in table.meta:
        table.meta["row_id"] = np.arange(len(table))
    return table


def check_rows(table: Table, card: dict) -> None:
    """The card's `rows`: the row count its parse must give (a different copy or filter is an error)."""
    expected = card.get("rows")
    if expected and len(table) != expected:
        raise DataError(f"dataset {card['name']!r}: {len(table)} rows after parsing, the card expects {expected} "
                        f"(`rows`; a different copy of the files, or a changed filter)")


def check_groups(table: Table, card: dict) -> None:
    """Both sensitive groups must occur: a `privileged` value that matches no row (or every row) leaves the
    fairness metrics undefined."""
    if table.s is None or not len(table):
        return
    share = float(np.mean(table.s))
    if share in (0.0, 1.0):
        values = table.meta.get("sensitive_values")
        seen = f" (its values: {', '.join(map(str, values))})" if values is not None else ""
        raise DataError(f"data.privileged={card.get('privileged')!r} matches {'no' if share == 0 else 'every'} row "
                        f"of {card.get('sensitive')}{seen}: one sensitive group would be empty and every fairness "
                        f"metric undefined")


# ---------------------------------------------------------------------------------------------- encoding
def _require(df: pd.DataFrame, cols, card: dict, what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DataError(
            f"dataset {card['name']!r}: {what} column(s) {missing} not in the data; columns: {list(df.columns)}"
        )


def _strings(col: pd.Series) -> pd.Series:
    return col.astype(str).str.strip()


def numbers(df: pd.DataFrame, col: str, card: dict) -> np.ndarray:
    """Column `col` as floats; a value that is not a finite number (text, nan, inf) is a DataError naming the
    file, the column, the first bad row and its value (a card's numeric bounds cannot hold it)."""
    x = pd.to_numeric(df[col], errors="coerce").to_numpy(float)
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        i = int(bad[0])
        files = ", ".join(card.get("files") or {}) or card.get("name")
        raise DataError(f"dataset {card.get('name')!r} ({files}): column {col!r} must hold finite numbers; row "
                        f"{i + 1} holds {df[col].iloc[i]!r} ({bad.size} such rows)")
    return x


def encode(df: pd.DataFrame, card: dict) -> Table:
    """The card-driven encoding shared by every tabular dataset.

    `features.numeric: {col: [lo, hi]}` -> (clip(x, lo, hi) - lo) / (hi - lo), bounds declared in the card;
    `features.onehot: [col, ...]` -> one 0/1 column per level (`features.levels[col]` fixes the level list,
    otherwise the sorted observed levels: a public schema fact for these benchmark tables);
    `features.binary: {col: value}` -> 1 if equal to value. The sensitive column is never a feature.
    """
    label, sens = card["label"], card.get("sensitive")
    _require(df, [label] + ([sens] if sens else []), card, "label/sensitive")
    df = df.reset_index(drop=True)
    y = _strings(df[label]).isin([str(v) for v in card["positive"]]).to_numpy(np.int64)
    s, meta = None, {}
    if sens:
        values = _strings(df[sens])
        s = (values == str(card["privileged"])).to_numpy(np.int64)
        meta["sensitive_values"] = sorted(values.unique())
        meta["sensitive_column"] = sens
    meta["label_column"] = label
    feats = card.get("features") or {}
    cols, names = [], []
    numeric = feats.get("numeric") or {}
    _require(df, list(numeric), card, "numeric feature")
    for col, (lo, hi) in numeric.items():
        x = numbers(df, col, card)
        cols.append(((np.clip(x, lo, hi) - lo) / (hi - lo))[:, None])
        names.append(col)
    onehot = feats.get("onehot") or []
    _require(df, onehot, card, "one-hot feature")
    levels_cfg = feats.get("levels") or {}
    for col in onehot:
        values = _strings(df[col])
        levels = [str(v) for v in levels_cfg.get(col, _sorted_levels(df[col]))]
        cols.append((values.to_numpy()[:, None] == np.asarray(levels)[None, :]).astype(float))
        names += [f"{col}={lv}" for lv in levels]
    binary = feats.get("binary") or {}
    _require(df, list(binary), card, "binary feature")
    for col, value in binary.items():
        cols.append((_strings(df[col]) == str(value)).to_numpy(float)[:, None])
        names.append(f"{col}={value}")
    X = np.hstack(cols) if cols else np.zeros((len(df), 0))
    frame, domain = discretise(df, card)
    if "split_column" in card:
        meta["row_is_test"] = df[card["split_column"]].to_numpy(bool)
    return Table(card["name"], X, y, s, names, frame, domain, dict(card.get("roles") or {}), meta)


def _sorted_levels(col: pd.Series) -> list[str]:
    """The observed levels as strings, in numeric order for a numeric column, else in string order."""
    if pd.api.types.is_numeric_dtype(col):
        return [str(v) for v in sorted(col.dropna().unique())]
    return sorted(_strings(col).unique())


def bin_edges(lo: float, hi: float, max_codes: int = MAX_CODES) -> list[float]:
    """Edges of the derived discrete view of a numeric feature with declared bounds [lo, hi]: one code per
    integer when the bounds are integers at most `max_codes` values apart, else `max_codes` equal-width bins."""
    if float(lo).is_integer() and float(hi).is_integer() and hi - lo + 1 <= max_codes:
        return [float(v) for v in np.arange(lo, hi + 2)]
    return [float(v) for v in np.linspace(lo, hi, max_codes + 1)]


def discrete_spec(card: dict) -> dict:
    """The card's discrete view: its `discrete:` section, or, for a card with declared `features` and no such
    section, one derived from them (prefair.md §8: every attribute integer-coded): each numeric feature cut by
    `bin_edges` of its declared bounds (`discrete_max_codes`, default 100), each one-hot feature by its levels,
    each binary feature into {other, value}, the sensitive column by its levels and the label into
    {other, positive} (code 1 = the card's positive label, as the fairness metrics read it)."""
    if card.get("discrete"):
        return dict(card["discrete"])
    feats = card.get("features") or {}
    if not feats or card.get("discrete") is False:
        return {}
    max_codes = int(card.get("discrete_max_codes") or MAX_CODES)
    spec: dict = {col: {"bins": bin_edges(lo, hi, max_codes)} for col, (lo, hi) in (feats.get("numeric") or {}).items()}
    levels = feats.get("levels") or {}
    spec |= {col: ({"levels": list(levels[col])} if col in levels else {}) for col in feats.get("onehot") or []}
    spec |= {col: {"one_of": [value]} for col, value in (feats.get("binary") or {}).items()}
    if card.get("sensitive"):
        spec[card["sensitive"]] = {}
    if card.get("label") and card.get("positive") is not None:
        spec[card["label"]] = {"one_of": list(card["positive"])}
    return spec


def left_out_of_discrete(card: dict) -> list[str]:
    """The declared features (`features:` numeric, onehot, binary) that the card's own `discrete:` section leaves
    out: a generator, which models the discrete view, neither learns nor releases them. None for a card without
    such a section (the derived view keeps every feature)."""
    if not card.get("discrete"):
        return []
    feats = card.get("features") or {}
    declared = [*(feats.get("numeric") or {}), *(feats.get("onehot") or []), *(feats.get("binary") or {})]
    return [c for c in declared if c not in card["discrete"]]


def declared_domain_size(card: dict) -> int | None:
    """The number of cells of the card's discrete view from its keys alone (each attribute's `levels`, `bins` or
    `one_of`), or None when an attribute takes its levels from the data."""
    size = 1
    for how in discrete_spec(card).values():
        how = how or {}
        if how.get("levels"):
            size *= len(how["levels"])
        elif how.get("bins"):
            size *= len(how["bins"]) - 1
        elif how.get("one_of") is not None:
            size *= 2
        else:
            return None
    return size


def discretise(df: pd.DataFrame, card: dict) -> tuple[pd.DataFrame | None, dict[str, int]]:
    """The discrete view `discrete_spec(card)`: `{col: {bins: [edges]} | {map: {...}} | {one_of: [...]} | {}}`.

    `bins`: numeric column cut at the declared edges (right-open, values outside the edges clipped into the
    first/last bin); `map`: raw value -> category name; `one_of`: code 1 for the listed values, 0 otherwise;
    empty: the column's levels as they are. Codes are 0..k-1 in the order of `levels` (declared, or the sorted
    observed levels: numeric order for a numeric column)."""
    spec = discrete_spec(card)
    if not spec:
        return None, {}
    _require(df, list(spec), card, "discrete")
    out, domain = {}, {}
    for col, how in spec.items():
        how = how or {}
        if "bins" in how:
            edges = np.asarray(how["bins"], dtype=float)
            x = numbers(df, col, card)
            codes = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
            k = len(edges) - 1
        elif "one_of" in how:
            codes = _strings(df[col]).isin([str(v) for v in how["one_of"]]).to_numpy(np.int64)
            k = 2
        else:
            codes, k = _level_codes(df[col], how, col, card)
        out[col] = codes.astype(np.int64)
        domain[col] = int(k)
    return pd.DataFrame(out), domain


def _level_codes(column: pd.Series, how: dict, col: str, card: dict) -> tuple[np.ndarray, int]:
    values = _strings(column)
    if "map" in how:
        values = values.map({str(a): str(b) for a, b in how["map"].items()}).fillna(values)
        observed = sorted(values.unique())
    else:
        observed = _sorted_levels(column)
    levels = [str(v) for v in how.get("levels", observed)]
    codes = values.map({v: i for i, v in enumerate(levels)})
    if codes.isna().any():
        bad = values[codes.isna()].iloc[0]
        raise DataError(f"dataset {card['name']!r}: column {col} has value {bad!r} outside levels {levels}")
    return codes.to_numpy(np.int64), len(levels)


# ---------------------------------------------------------------------------------------------- splitting
def split(table: Table, test_size: float, rng: np.random.Generator,
          unlabelled_size: float = 0.0) -> tuple[Table, Table]:
    """Train/test split: the card's predefined split when it has one, else a seeded random permutation.

    Semi-supervised runs (`unlabelled_size` > 0, fair_sampling.md §1.6): that fraction of the rows outside any
    predefined test split is drawn first as the unlabelled pool (never test rows); `test_size` then applies to
    the labelled rest. The train table holds the labelled training rows and the pool, told apart by
    `meta["row_labelled"]`; `hide_labels` gives the view a plugin fits on (the true labels stay with the runner
    for evaluation only)."""
    if unlabelled_size > 0:
        return _split_semi_supervised(table, test_size, rng, unlabelled_size)
    if "row_is_test" in table.meta:
        is_test = table.meta["row_is_test"]
        return table.subset(np.flatnonzero(~is_test)), table.subset(np.flatnonzero(is_test))
    if test_size <= 0:
        return table, table
    perm = rng.permutation(len(table))
    n_test = int(round(test_size * len(table)))
    return table.subset(np.sort(perm[n_test:])), table.subset(np.sort(perm[:n_test]))


def split_warnings(train: Table, test: Table, kind: str) -> list[str]:
    """Why a run's numbers may mean nothing, for its result's `warnings` (issue 11 item 13): the test rows
    are the training rows, too few rows to measure anything, a sensitive group without test rows.
    Graph learners are scored against a reference graph, embeddings on splits of their own, not on test rows: a
    graph split states its own premise warnings in the tables' meta (`split_warnings`, datasets/graphs.py)."""
    if kind in ("graph", "embedding"):
        return list(train.meta.get("split_warnings", ()))
    out = []
    if test is train:
        out.append("data.test_size=0: the metrics are measured on the training rows, not on held-out data")
    if min(len(train), len(test)) < MIN_ROWS:
        out.append(f"only {len(train)} training and {len(test)} test rows (fewer than {MIN_ROWS}): the metrics "
                   f"are dominated by sampling error")
    if test.s is not None and len(test):
        for g in (0, 1):
            if not np.any(test.s == g):
                out.append(f"no test row has s={g}: the fairness metrics comparing the groups are undefined")
    return out


def check_labels(train: Table, kind: str) -> None:
    """A classifier trained on one class learns a constant: its accuracy and every fairness gap would measure
    nothing, so such a run is refused (labels hidden for semi-supervised learning, y = -1, do not count)."""
    if kind not in ("classifier", "semi_supervised"):
        return
    seen = np.unique(train.y[train.y >= 0])
    if len(seen) < 2:
        what = f"only the class {seen[0].item()!r}" if len(seen) else "no label"
        raise DataError(f"data={train.name}: the training rows hold {what}: a classifier would learn a constant and "
                        f"its accuracy and fairness gaps would mean nothing; check the card's label and positive "
                        f"values (data.positive), or the rows chosen (data.n)")


def _split_semi_supervised(table: Table, test_size: float, rng: np.random.Generator,
                           unlabelled_size: float) -> tuple[Table, Table]:
    predefined = table.meta.get("row_is_test")
    pool = np.arange(len(table)) if predefined is None else np.flatnonzero(~predefined)
    perm = rng.permutation(pool)
    n_unlabelled = int(round(unlabelled_size * len(perm)))
    unlabelled, labelled = perm[:n_unlabelled], perm[n_unlabelled:]
    if predefined is None:
        n_test = int(round(test_size * len(labelled)))
        test, labelled = labelled[:n_test], labelled[n_test:]
    else:
        test = np.flatnonzero(predefined)
    if not len(test) or not len(labelled):
        raise DataError(f"data={table.name}: a semi-supervised split needs labelled training rows and test rows "
                        f"(got {len(labelled)} labelled, {len(test)} test; check test_size and unlabelled_size)")
    is_labelled = np.zeros(len(table), dtype=bool)
    is_labelled[labelled] = True
    marked = Table(**{**table.__dict__, "meta": table.meta | {"row_labelled": is_labelled}})
    return marked.subset(np.sort(np.concatenate([labelled, unlabelled]))), table.subset(np.sort(test))


def hide_labels(table: Table) -> Table:
    """The table with y = -1 on the rows `meta["row_labelled"]` marks unlabelled (what a semi-supervised plugin
    sees); the protected attribute stays available on every row."""
    hidden = np.where(table.meta["row_labelled"], table.y, -1)
    return Table(**{**table.__dict__, "y": hidden})
