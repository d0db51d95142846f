"""MNIST (LeCun et al.): the four original idx `.gz` files, 60,000 train + 10,000 test images (dpsgd_f.md §4).

`read` parses the idx files into arrays; `encode` scales pixels to [0, 1] (the declared bounds 0..255, not read
off the data), keeps the digit as the label `y` (0..9) and the original train/test split (`row_is_test`).
There is no sensitive attribute: the DP-SGD family uses the class as the group (spec C10).
"""

from __future__ import annotations

import gzip

import numpy as np

from privfair_cli.datasets import Table
from privfair_cli.errors import DataError

_MAGIC = {2049: 1, 2051: 3}  # idx1 (labels), idx3 (images)
VIEWS = ("features", "numeric")  # pixels scaled by their declared range 0..255 (the card gives the label)


def read_idx(path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        raw = f.read()
    magic = int.from_bytes(raw[:4], "big")
    if magic not in _MAGIC:
        raise DataError(f"{path}: not an idx1/idx3 file (magic {magic})")
    ndim = _MAGIC[magic]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise DataError(f"{path}: truncated idx file ({data.size} values, header says {shape})")
    return data.reshape(shape)


def read(paths, card) -> dict[str, np.ndarray]:
    files = dict(zip(card["files"], paths, strict=True))
    parts = {}
    for split in ("train", "t10k"):
        images = read_idx(files[f"{split}-images-idx3-ubyte.gz"])
        labels = read_idx(files[f"{split}-labels-idx1-ubyte.gz"])
        if len(images) != len(labels):
            raise DataError(f"mnist {split}: {len(images)} images but {len(labels)} labels")
        parts[split] = (images.reshape(len(images), -1), labels)
    return {
        "images": np.concatenate([parts["train"][0], parts["t10k"][0]]),
        "labels": np.concatenate([parts["train"][1], parts["t10k"][1]]).astype(np.int64),
        "is_test": np.repeat([False, True], [len(parts["train"][1]), len(parts["t10k"][1])]),
    }


def encode(raw: dict[str, np.ndarray], card) -> Table:
    X = raw["images"].astype(np.float32) / np.float32(255.0)
    names = [f"pixel{i}" for i in range(X.shape[1])]
    classes = int(card.get("classes", 10))
    meta = {"row_is_test": raw["is_test"], "classes": classes,
            "group_names": [f"class{k}" for k in range(classes)],
            "compare_groups": list(card.get("compare_groups") or [])}
    return Table(card["name"], X, raw["labels"], None, names, meta=meta)
