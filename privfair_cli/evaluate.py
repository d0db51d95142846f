"""Evaluation per task kind. Each function gets the fitted plugin and the train / test tables and returns
flat metric name -> number. Plugins add their own numbers through `extra_metrics()`."""

from __future__ import annotations

import numpy as np

from privfair_cli import metrics


def classifier(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    return metrics.classification(test.y, plugin.predict(test.X), test.s)


def generator(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    synth = plugin.sample(len(train), rng)
    plugin.synthetic = synth
    return {
        "tvd_1way": metrics.tvd_kway(train.frame, synth, train.domain, 1),
        "tvd_2way": metrics.tvd_kway(train.frame, synth, train.domain, 2),
    }


def graph(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    return metrics.graph_recovery(train.meta["true_adjacency"], plugin.adjacency)


EVALUATORS = {"classifier": classifier, "generator": generator, "graph": graph}
