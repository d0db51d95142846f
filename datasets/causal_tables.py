"""Binary tables with a causal graph (spec cfgan.md §7): the loader of `adult_cfgan` and the shared encoding of
every card with a `causal_graph:` block (also `synth_causal`).

The card's `causal_graph:` block (nodes = the keys and children of `edges`, `sensitive`, `outcome`, the unjustified
set `unjustified` of the indirect path set, the counterfactual `context`) is validated by
`causal_effects.CausalGraph.from_spec` with one-line errors, before any file is parsed (cycle, S not an ancestor of
Y) and after the binarisation (a node that is not a column). `binarise:` turns each raw column into one 0/1
node: `{from: col, ge: threshold}` (numeric, 1 when >= threshold) or `{from: col, one_of: [values coded 1]}`; a
missing value ("?") is 0. `duplicate_test: true` appends the test file a second time (65,123 rows: the published
Adult numbers are computed on adult.data + adult.test + adult.test, spec §7.1 / B2).

The table: the discrete view `frame` holds the graph's nodes (all binary, in topological order), `X` the 0/1
nodes other than the sensitive node and the outcome, `y` the outcome, `s` the sensitive node;
`meta["causal_graph"]` the validated block.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from privfair_cli.algorithms.causal_effects import CausalGraph
from privfair_cli.errors import DataError

from . import Table

VIEWS = ("causal_graph", "discrete", "sensitive", "binary_label", "label", "features")


def graph_of(card: dict, columns=None) -> CausalGraph:
    return CausalGraph.from_spec(card.get("causal_graph") or {}, columns)


def read(paths, card) -> pd.DataFrame:
    from privfair_cli.datasets import tabular

    graph_of(card)  # structural errors before any file is parsed
    base = card.get("format") or {}
    frames = []
    for (_fname, spec), path in zip((card.get("files") or {}).items(), paths, strict=True):
        fmt = base | ((spec or {}).get("format") or {})
        frames.append(tabular.read_file(Path(path), fmt))
    if card.get("duplicate_test", False):
        frames.append(frames[-1])
    df = pd.concat(frames, ignore_index=True)
    return tabular.derive(df, card.get("derive") or {}, card["name"])


def binarise(df: pd.DataFrame, rules: dict, name: str) -> pd.DataFrame:
    out = {}
    for node, rule in rules.items():
        col = rule.get("from", node)
        if col not in df.columns:
            raise DataError(f"dataset {name!r}: binarise.{node} reads column {col!r}, not in the data; columns: "
                            f"{', '.join(map(str, df.columns))}")
        raw = df[col]
        if "ge" in rule:
            out[node] = (pd.to_numeric(raw, errors="coerce").fillna(-np.inf) >= float(rule["ge"])).astype(np.int64)
        elif "one_of" in rule:
            out[node] = raw.astype(str).str.strip().isin([str(v) for v in rule["one_of"]]).astype(np.int64)
        else:
            raise DataError(f"dataset {name!r}: binarise.{node} needs `ge: <threshold>` or `one_of: [values]`")
    return pd.DataFrame(out)


def table(frame01: pd.DataFrame, card: dict) -> Table:
    """The Table of a 0/1 frame whose columns include the graph's nodes."""
    g = graph_of(card, list(frame01.columns))
    frame = frame01[list(g.nodes)].astype(np.int64).reset_index(drop=True)
    others = [n for n in g.nodes if n not in (g.sensitive, g.outcome)]
    meta = {"causal_graph": dict(card["causal_graph"]), "sensitive_column": g.sensitive, "label_column": g.outcome,
            "sensitive_values": [0, 1]}
    return Table(card["name"], frame[others].to_numpy(float), frame[g.outcome].to_numpy(np.int64),
                 frame[g.sensitive].to_numpy(np.int64), others, frame, {n: 2 for n in g.nodes},
                 {"protected": [g.sensitive], "outcome": [g.outcome]}, meta)


def encode(df: pd.DataFrame, card) -> Table:
    return table(binarise(df, card.get("binarise") or {}, card["name"]), card)
