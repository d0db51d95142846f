"""The output view of the distinguishing test: a statistic of a fitted plugin's release, by task kind
(`STATISTICS`; a plugin may define its own `audit_statistic(canary)`), and the canaries' log-likelihood under a
classifier, which also scores the one-run test's canaries."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from privfair_cli.errors import ConfigError


def log_likelihoods(plugin, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log p(y_i | x_i) under the released classifier, per row (at least log 1e-300)."""
    p = np.asarray(plugin.predict_proba(X), dtype=float)
    p1 = p.reshape(len(X), -1)[:, -1] if p.ndim > 1 else p
    return np.log(np.clip(np.where(y == 1, p1, 1 - p1), 1e-300, None))


def _classifier(plugin, canary: dict) -> float:
    X = np.asarray(canary["X"], dtype=float)[None]
    return float(log_likelihoods(plugin, X, np.asarray([int(canary["y"])]))[0])


def _generator(plugin, canary: dict, n: int, rng: np.random.Generator) -> float:
    synth = plugin.sample(n, rng)
    return float(sum(np.mean(synth[c].to_numpy(int) == code) for c, code in canary["frame"].items()))


def _embedding(plugin, canary: dict) -> float:
    u, v = canary["edge"]
    e = np.asarray(plugin.embedding, dtype=float)
    return float(e[u] @ e[v])


def _graph(plugin, canary: dict) -> float:
    return float(np.asarray(plugin.adjacency).sum() / 2)


STATISTICS: dict[str, Callable] = {"classifier": _classifier, "generator": _generator, "graph": _graph,
                                   "embedding": _embedding}


def statistic(plugin, canary: dict, n: int, rng: np.random.Generator) -> float:
    """The statistic of `plugin`'s release for `canary`: its own `audit_statistic`, else its kind's; a generator
    samples `n` rows with `rng`."""
    own = getattr(plugin, "audit_statistic", None)
    if own is not None:
        return float(own(canary))
    if plugin.kind == "generator":
        return _generator(plugin, canary, n, rng)
    if plugin.kind == "classifier" and not hasattr(plugin, "predict_proba"):
        raise ConfigError(f"algo={plugin.name}: its release is not a model with predict_proba and it defines no "
                          "audit_statistic; nothing to score a canary with")
    if plugin.kind not in STATISTICS:
        raise ConfigError(f"algo={plugin.name}: no audit statistic for task kind {plugin.kind!r}; audited kinds: "
                          f"{', '.join(STATISTICS)}")
    return STATISTICS[plugin.kind](plugin, canary)
