"""Dataset loading: file resolution, checksums, parse caching, and the card-driven encoding.

A dataset is described by its card (`configs/data/<name>.yaml`). File-based cards name a `loader` module in
this package whose `read(paths, card) -> pandas.DataFrame` parses the raw files; synthetic cards name a module
whose `generate(card, rng) -> Table` draws the data. `load(card)` returns a `Table`:

- `X`, `y`, `s`: the classifier view (features encoded into [0, 1] using the card's *declared* bounds, so that
  sensitivities never depend on the private data), label, binary sensitive attribute (1 = `privileged`);
- `frame`, `domain`, `roles`: the discrete view (integer codes per attribute) used by generators and graph
  learners, built from the card's `discrete:` section when it has one.

Files are looked up in `$PRIVFAIR_DATA_DIR/<subdir>/`, then `~/.cache/privfair/data/<subdir>/`, then downloaded
from the card's `url` (sha256-verified). Parsed tables are cached under `~/.cache/privfair/parsed/` (or
`$PRIVFAIR_CACHE_DIR`), keyed by the card and the files' size and mtime.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pickle
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from privfair_cli.errors import DataError

CACHE_VERSION = 1


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


# ---------------------------------------------------------------------------------------------- files
def cache_root() -> Path:
    return Path(os.environ.get("PRIVFAIR_CACHE_DIR") or Path.home() / ".cache" / "privfair")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def resolve_files(card: dict) -> list[Path]:
    """Paths of the card's files, downloading into the user cache when they are nowhere local."""
    subdir = card.get("subdir") or card["name"]
    dirs = []
    if os.environ.get("PRIVFAIR_DATA_DIR"):
        base = Path(os.environ["PRIVFAIR_DATA_DIR"]).expanduser()
        dirs += [base / subdir, base]
    user = cache_root() / "data" / subdir
    dirs.append(user)
    paths, missing = [], []
    for fname, spec in (card.get("files") or {}).items():
        spec = spec or {}
        found = next((d / fname for d in dirs if (d / fname).is_file()), None)
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


def verify(card: dict, paths: list[Path]) -> None:
    """Check every file's sha256 against the card; a mismatch is an error unless `verify: false`."""
    if card.get("verify", True) is False:
        return
    for (fname, spec), path in zip((card.get("files") or {}).items(), paths, strict=True):
        want = (spec or {}).get("sha256")
        if want and _sha256(path) != want:
            raise DataError(
                f"{path}: sha256 differs from the dataset card's (a different or truncated copy of {fname}); "
                f"replace the file or set data.verify=false"
            )


# ---------------------------------------------------------------------------------------------- parsing
def read_csv_strict(path: Path, expected_cols: int | None = None, **kw) -> pd.DataFrame:
    """pandas.read_csv that names the file and line of any malformed row instead of padding it with NaN."""
    try:
        df = pd.read_csv(path, on_bad_lines="error", **kw)
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        raise DataError(f"{path}: malformed file ({str(err).strip().splitlines()[-1]})") from None
    if expected_cols is not None and df.shape[1] != expected_cols:
        raise DataError(f"{path}: expected {expected_cols} columns, found {df.shape[1]}")
    short = df.isna().all(axis=1) | df.iloc[:, -1].isna()
    if short.any():
        skip = kw.get("skiprows", 0) if isinstance(kw.get("skiprows", 0), int) else 0
        header = 0 if kw.get("header", "infer") is None else 1
        line = int(np.flatnonzero(short.to_numpy())[0]) + 1 + skip + header
        raise DataError(f"{path}: line {line} is incomplete (truncated or missing fields)")
    return df


RUN_KEYS = ("n", "test_size", "expected_d", "allow_d_mismatch", "verify")  # card keys that do not change the parse


def _cache_key(card: dict, paths: list[Path]) -> str:
    stats = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in paths]
    parse = {k: v for k, v in card.items() if k not in RUN_KEYS}
    blob = json.dumps([CACHE_VERSION, parse, stats], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def load(card: dict, rng: np.random.Generator | None = None) -> Table:
    """The dataset a card describes: generated (synthetic cards) or read, encoded and cached."""
    module = importlib.import_module(f"privfair_cli.datasets.{card['loader']}")
    if hasattr(module, "generate"):
        return module.generate(card, rng if rng is not None else np.random.default_rng(card.get("data_seed", 0)))
    paths = resolve_files(card)
    cache = cache_root() / "parsed" / f"{card['name']}-{_cache_key(card, paths)}.pkl"
    if cache.is_file():
        try:
            with open(cache, "rb") as f:
                return pickle.load(f)
        except Exception:  # a stale or partial cache is rebuilt, never trusted
            cache.unlink(missing_ok=True)
    verify(card, paths)
    raw = module.read(paths, card)
    table = getattr(module, "encode", encode)(raw, card)
    cache.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=cache.parent, delete=False) as tmp:
        pickle.dump(table, tmp, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp.name, cache)
    return table


# ---------------------------------------------------------------------------------------------- encoding
def _require(df: pd.DataFrame, cols, card: dict, what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise DataError(
            f"dataset {card['name']!r}: {what} column(s) {missing} not in the data; columns: {list(df.columns)}"
        )


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
    y = df[label].astype(str).str.strip().isin([str(v) for v in card["positive"]]).to_numpy(np.int64)
    s = None
    if sens:
        s = (df[sens].astype(str).str.strip() == str(card["privileged"])).to_numpy(np.int64)
    feats = card.get("features") or {}
    cols, names = [], []
    numeric = feats.get("numeric") or {}
    _require(df, list(numeric), card, "numeric feature")
    for col, (lo, hi) in numeric.items():
        x = pd.to_numeric(df[col], errors="raise").to_numpy(float)
        cols.append(((np.clip(x, lo, hi) - lo) / (hi - lo))[:, None])
        names.append(col)
    onehot = feats.get("onehot") or []
    _require(df, onehot, card, "one-hot feature")
    levels_cfg = feats.get("levels") or {}
    for col in onehot:
        values = df[col].astype(str).str.strip()
        levels = [str(v) for v in levels_cfg.get(col, sorted(values.unique()))]
        cols.append((values.to_numpy()[:, None] == np.asarray(levels)[None, :]).astype(float))
        names += [f"{col}={lv}" for lv in levels]
    binary = feats.get("binary") or {}
    _require(df, list(binary), card, "binary feature")
    for col, value in binary.items():
        cols.append((df[col].astype(str).str.strip() == str(value)).to_numpy(float)[:, None])
        names.append(f"{col}={value}")
    X = np.hstack(cols) if cols else np.zeros((len(df), 0))
    frame, domain = discretise(df, card)
    meta = {}
    if "split_column" in card:
        meta["row_is_test"] = df[card["split_column"]].to_numpy(bool)
    return Table(card["name"], X, y, s, names, frame, domain, dict(card.get("roles") or {}), meta)


def discretise(df: pd.DataFrame, card: dict) -> tuple[pd.DataFrame | None, dict[str, int]]:
    """The discrete view from the card's `discrete:` section: `{col: {bins: [edges]} | {map: {...}} | {}}`.

    `bins`: numeric column cut at the declared edges (right-open, values outside the edges clipped into the
    first/last bin); `map`: raw value -> category name; empty: the column's levels as they are. Codes are
    0..k-1 in the order of `levels` (declared or sorted observed)."""
    spec = card.get("discrete")
    if not spec:
        return None, {}
    _require(df, list(spec), card, "discrete")
    out, domain = {}, {}
    for col, how in spec.items():
        how = how or {}
        if "bins" in how:
            edges = np.asarray(how["bins"], dtype=float)
            x = pd.to_numeric(df[col], errors="raise").to_numpy(float)
            codes = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
            k = len(edges) - 1
        else:
            values = df[col].astype(str).str.strip()
            if "map" in how:
                values = values.map({str(a): str(b) for a, b in how["map"].items()}).fillna(values)
            levels = [str(v) for v in how.get("levels", sorted(values.unique()))]
            lookup = {v: i for i, v in enumerate(levels)}
            codes = values.map(lookup)
            if codes.isna().any():
                bad = values[codes.isna()].iloc[0]
                raise DataError(f"dataset {card['name']!r}: column {col} has value {bad!r} outside levels {levels}")
            codes = codes.to_numpy(np.int64)
            k = len(levels)
        out[col] = codes.astype(np.int64)
        domain[col] = int(k)
    return pd.DataFrame(out), domain


def split(table: Table, test_size: float, rng: np.random.Generator) -> tuple[Table, Table]:
    """Train/test split: the card's predefined split when it has one, else a seeded random permutation."""
    if "row_is_test" in table.meta:
        is_test = table.meta["row_is_test"]
        return table.subset(np.flatnonzero(~is_test)), table.subset(np.flatnonzero(is_test))
    if test_size <= 0:
        return table, table
    perm = rng.permutation(len(table))
    n_test = int(round(test_size * len(table)))
    return table.subset(np.sort(perm[n_test:])), table.subset(np.sort(perm[:n_test]))
