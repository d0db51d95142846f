"""Evaluation per task kind: the one place that turns a fitted plugin into metrics. Each function gets the fitted
plugin and the train / test tables and returns flat metric name -> number. Plugins add their own numbers through
`extra_metrics()`."""

from __future__ import annotations

import time

import numpy as np

from privfair_cli import downstream, metrics


def classifier(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    return metrics.classification(test.y, plugin.predict(test.X), test.s)


def generator(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    """Sample the release (`plugin.n_rows()` rows where the plugin decides its size, else len(train)), compare it
    with the released (training) table (`metrics.release_metrics`) and, for a plugin whose config is a
    `downstream.ReleaseEvaluation`, train its classifiers on it and test them on the test split
    (`downstream.downstream_metrics`, with the plugin's `fairness_roles()` or the card's roles).
    `runtime` = the plugin's `fit_seconds` (where it times its fit) + the sampling time."""
    t0 = time.perf_counter()
    synth = plugin.sample(plugin.n_rows() if hasattr(plugin, "n_rows") else len(train), rng)
    runtime = getattr(plugin, "fit_seconds", 0.0) + time.perf_counter() - t0
    plugin.synthetic = synth  # written by the plugin's artifacts()
    settings = getattr(plugin, "cfg", None)
    evaluation = settings if isinstance(settings, downstream.ReleaseEvaluation) else None
    out = metrics.release_metrics(train.frame, synth, train.domain, evaluation.max_cells if evaluation else None)
    if evaluation is not None:
        roles = plugin.fairness_roles() if hasattr(plugin, "fairness_roles") else test.roles
        out |= downstream.downstream_metrics(synth, test, roles, evaluation, rng)
    return out | {"runtime": runtime, "n_synthetic": len(synth)}


def graph(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    return metrics.graph_recovery(train.meta["true_adjacency"], plugin.adjacency)


EVALUATORS = {"classifier": classifier, "generator": generator, "graph": graph}
