"""A cache format that cannot run code: a parsed `Table` as one `.npz` of plain arrays plus a JSON tree.

`pickle` (the old parse cache) executes whatever a planted file asks for. This module writes only what a parsed
table holds - numbers, strings, lists, tuples, dicts, numpy arrays and scalars, pandas frames, CSR matrices and
the dataclasses named in `CLASSES` - and reads it back with `np.load(allow_pickle=False)` and `json.loads`, so a
file in the cache folder can at worst fail to load (and is then removed and rebuilt, `read_cache`). An object of
any other type is refused on writing (`TypeError`): that table is simply not cached.
"""

from __future__ import annotations

import dataclasses
import json
from typing import IO

import numpy as np

from privfair_cli import lazy

pd = lazy.module("pandas")
sp = lazy.module("scipy.sparse")

TREE = "__tree__"


def _classes() -> dict[str, type]:
    from privfair_cli.datasets import Table
    from privfair_cli.datasets.graphs import Graph

    return {"Table": Table, "Graph": Graph}


def save(obj, f: IO[bytes]) -> None:
    """Write `obj` to the binary file `f` (npz: its arrays, and the JSON tree that places them)."""
    arrays: dict[str, np.ndarray] = {}
    tree = _encode(obj, arrays, {cls: name for name, cls in _classes().items()})
    np.savez(f, **arrays, **{TREE: np.array(json.dumps(tree))})


def load(path):
    """The object `save` wrote; raises on anything else (a foreign or damaged file)."""
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    return _decode(json.loads(str(arrays.pop(TREE))), arrays, _classes())


def _array(a: np.ndarray, arrays: dict) -> dict:
    key = f"a{len(arrays)}"
    if a.dtype == object:
        if not all(isinstance(v, str) for v in a.ravel()):
            raise TypeError("an object array that is not all strings cannot be cached safely")
        arrays[key] = a.astype(str)
        return {"t": "nd", "a": key, "object": True}
    arrays[key] = a
    return {"t": "nd", "a": key}


def _encode(x, arrays: dict, names: dict):
    if x is None or isinstance(x, bool | int | float | str):
        return x
    if isinstance(x, np.ndarray):
        return _array(x, arrays)
    if isinstance(x, np.generic):
        return {"t": "np", "dtype": x.dtype.str, "v": x.item()}
    if isinstance(x, list | tuple):
        return {"t": type(x).__name__, "v": [_encode(v, arrays, names) for v in x]}
    if isinstance(x, dict):
        return {"t": "dict", "k": [_encode(k, arrays, names) for k in x],
                "v": [_encode(v, arrays, names) for v in x.values()]}
    if isinstance(x, pd.DataFrame):
        index = x.index
        plain = isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1
        cols = []
        for c in x.columns:
            col = x[c]
            if isinstance(col.dtype, pd.CategoricalDtype):
                cols.append({"t": "cat", "codes": _array(col.cat.codes.to_numpy(), arrays),
                             "categories": _encode(list(col.cat.categories), arrays, names),
                             "ordered": bool(col.cat.ordered)})
            else:
                cols.append(_array(col.to_numpy(), arrays))
        return {"t": "df", "columns": _encode(list(x.columns), arrays, names), "data": cols,
                "index": len(x) if plain else _array(index.to_numpy(), arrays)}
    if isinstance(x, sp.csr_matrix):
        return {"t": "csr", "shape": list(x.shape), "data": _array(x.data, arrays),
                "indices": _array(x.indices, arrays), "indptr": _array(x.indptr, arrays)}
    if dataclasses.is_dataclass(x) and type(x) in names:
        return {"t": "dc", "cls": names[type(x)],
                "f": {f.name: _encode(getattr(x, f.name), arrays, names) for f in dataclasses.fields(x)}}
    raise TypeError(f"{type(x).__name__} cannot be cached safely")


def _decode(x, arrays: dict, classes: dict):
    if not isinstance(x, dict):
        return x
    t = x["t"]
    if t == "nd":
        a = arrays[x["a"]]
        return a.astype(object) if x.get("object") else a
    if t == "np":
        return np.dtype(x["dtype"]).type(x["v"])
    if t in ("list", "tuple"):
        items = [_decode(v, arrays, classes) for v in x["v"]]
        return items if t == "list" else tuple(items)
    if t == "dict":
        return {_decode(k, arrays, classes): _decode(v, arrays, classes) for k, v in zip(x["k"], x["v"], strict=True)}
    if t == "df":
        columns = _decode(x["columns"], arrays, classes)
        data = {}
        for c, col in zip(columns, x["data"], strict=True):
            if col["t"] == "cat":
                data[c] = pd.Categorical.from_codes(_decode(col["codes"], arrays, classes),
                                                    _decode(col["categories"], arrays, classes), col["ordered"])
            else:
                data[c] = _decode(col, arrays, classes)
        index = x["index"]
        frame = pd.DataFrame(data, columns=columns,
                             index=pd.RangeIndex(index) if isinstance(index, int) else _decode(index, arrays, classes))
        return frame
    if t == "csr":
        return sp.csr_matrix((_decode(x["data"], arrays, classes), _decode(x["indices"], arrays, classes),
                              _decode(x["indptr"], arrays, classes)), shape=tuple(x["shape"]))
    if t == "dc":
        return classes[x["cls"]](**{k: _decode(v, arrays, classes) for k, v in x["f"].items()})
    raise ValueError(f"unknown cache entry {t!r}")
