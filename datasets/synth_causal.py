"""`synth_causal`: the synthetic causal model of spec cfgan.md §6 (the seed's Fig. 7.2 graph A -> S, A -> B,
A -> Y, S -> B, S -> Y, B -> Y), all binary, logistic structural equations with the card's coefficients. Exact
effects (enumeration): TE 0.2727, SE via B 0.0926, direct 0.1717, CE(A=1) 0.2805, CE(A=0) 0.2649.
The rows come from the run's data stream.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .causal_tables import graph_of, table

VIEWS = ("causal_graph", "discrete", "sensitive", "binary_label", "label", "features")


def sample(card, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """n rows of the card's logistic model: `equations: {node: [intercept, {parent: coefficient}]}`."""
    g = graph_of(card)
    eq = card["equations"]
    out: dict[str, np.ndarray] = {}
    for node in g.nodes:
        intercept, coefs = eq[node][0], (eq[node][1] if len(eq[node]) > 1 else {}) or {}
        logit = intercept + sum(float(c) * out[p] for p, c in coefs.items())
        out[node] = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return pd.DataFrame(out)


def generate(card, rng: np.random.Generator):
    return table(sample(card, int(card.get("rows_generated", 50_000)), rng), card)
