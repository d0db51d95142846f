"""Evaluation per task kind: the one place that turns a fitted plugin into metrics. Each function gets the fitted
plugin and the train / test tables and returns flat metric name -> number. Plugins add their own numbers through
`extra_metrics()`.

Graph runs are scored on the skeleton (`metrics.graph_recovery`, privpc.md §1.5) against the data's generating
graph (`meta["true_adjacency"]`) or, for data without one (Adult), against the plugin's non-private reference
graph (`reference_graph(data)`, PC on the same data, §4.6.3). The reference is cached on disk under
`<cache>/reference/` (the data cache's root, `$PRIVFAIR_CACHE_DIR` or `~/.cache/privfair`), keyed by the
data's content and the plugin's `reference_settings()`, so it is computed once per dataset and setting.

Classifier runs also save their test-set predictions (`save_predictions`, on by default; issue 12 item 8) as
`artifacts/predictions.parquet` when pyarrow is installed, else `artifacts/predictions.csv`: one row per test
row with `row_id` (its position in the dataset as loaded), `label`, `group` (the sensitive attribute s, empty
without one), `score` (the predicted probability of the label 1, or of the predicted class for more than two
classes; empty for a plugin without `predict_proba`) and `prediction`, so that any metric can be recomputed
later (fairlearn, AIF360).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from privfair_cli import downstream, metrics
from privfair_cli.datasets import cache_root, read_cache, write_cache
from privfair_cli.errors import DataError

REFERENCE_CACHE_VERSION = 1


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
    cap = evaluation.max_cells if evaluation else metrics.MARGINAL_MAX_CELLS
    out = metrics.release_metrics(train.frame, synth, train.domain, cap)
    if evaluation is not None:
        roles = plugin.fairness_roles() if hasattr(plugin, "fairness_roles") else test.roles
        out |= downstream.downstream_metrics(synth, test, roles, evaluation, rng)
    return out | {"runtime": runtime, "n_synthetic": len(synth)}


def graph(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    """Skeleton recovery against the generating graph, else the plugin's reference graph (non-private PC on the
    same rows: a card with a discrete view and no generating graph, e.g. Adult). The graph compared with is left
    on the plugin (`reference_adjacency`) for its artifacts."""
    truth = train.meta.get("true_adjacency")
    if truth is None:
        truth = reference_graph(plugin, train)
    plugin.reference_adjacency = np.asarray(truth)
    return metrics.graph_recovery(truth, plugin.adjacency)


def content_hash(table) -> str:
    """sha256 of a table's content: its name, columns, domain, features and discrete view."""
    digest = hashlib.sha256(json.dumps([table.name, list(table.feature_names), table.domain], default=str).encode())
    digest.update(np.ascontiguousarray(table.X).tobytes())
    if table.frame is not None:
        digest.update(json.dumps([str(c) for c in table.frame.columns]).encode())
        digest.update(pd.util.hash_pandas_object(table.frame, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def reference_graph(plugin, data) -> np.ndarray:
    """The plugin's reference skeleton for `data`, from the disk cache when it holds it (a damaged entry is
    recomputed); a cache that cannot be written is skipped."""
    if not hasattr(plugin, "reference_graph"):
        raise DataError(f"data={data.name} has no generating graph and algo={plugin.name} defines no reference "
                        "graph to compare with")
    blob = json.dumps([REFERENCE_CACHE_VERSION, plugin.reference_settings(), content_hash(data)], sort_keys=True)
    path = cache_root() / "reference" / f"{data.name}-{hashlib.sha256(blob.encode()).hexdigest()[:24]}.npy"
    shape = np.shape(plugin.adjacency)
    adj = read_cache(path, lambda p: np.load(p, allow_pickle=False))
    if adj is not None and adj.shape == shape and adj.dtype == bool:
        return adj
    adj = np.asarray(plugin.reference_graph(data), dtype=bool)
    write_cache(path, lambda f: np.save(f, adj))
    return adj


def _accuracy_over_splits(X, y, train_ratio: float, splits: int, model: str, rng: np.random.Generator) -> float:
    """Mean test accuracy over `splits` uniform random (not stratified) train/test splits of a linear classifier
    with C = 1: `svm` = scikit-learn's LinearSVC(C=1) (squared hinge, intercept penalised, one-vs-rest over the
    classes present in the training draw), `lr` = LogisticRegression(C=1) (binary). Every split and class is
    solved at once to convergence by algorithms/batched_linear (the same objectives; tests cross-check against
    scikit-learn). A one-class training draw predicts that class."""
    from threadpoolctl import threadpool_limits

    from privfair_cli.algorithms import batched_linear

    y = np.asarray(y)
    n_train = max(2, int(round(train_ratio * len(y))))
    perms = np.stack([rng.permutation(len(y)) for _ in range(splits)])
    tr, te = perms[:, :n_train], perms[:, n_train:]
    classes, codes = np.unique(y, return_inverse=True)
    present = np.zeros((splits, len(classes)), dtype=bool)
    present[np.arange(splits)[:, None], codes[tr]] = True
    counts = present.sum(1)
    binary = len(classes) == 2 or model == "lr"
    targets = [1] if binary else range(len(classes))  # binary: one model for the larger code, as scikit-learn
    Xtr, fits = X[tr], []
    with threadpool_limits(1):
        for c in targets:
            fits.append(batched_linear.fit(Xtr, (codes[tr] == c).astype(float), model, 1.0))
    scores = np.empty((splits, te.shape[1], len(targets)))
    for i, w in enumerate(fits):
        scores[:, :, i] = np.einsum("std,sd->st", X[te], w[:, :-1]) + w[:, -1][:, None]
    if binary:
        pred = (scores[:, :, 0] > 0).astype(int)
    else:
        scores[~np.repeat(present[:, None, :], te.shape[1], axis=1)] = -np.inf  # absent classes: never predicted
        pred = scores.argmax(2)
    only = codes[tr[:, 0]]
    pred = np.where((counts == 1)[:, None], only[:, None], pred)
    return float(np.mean(pred == codes[te]))


def embedding(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    """Network embedding (dpne.md §5.3-5.4), task from the graph card (`data.task`):
    `vertex_classification_accuracy`: rows of `plugin.embedding` L2-normalised, one-vs-rest LinearSVC(C=1) trained
    on `train_ratio` of the vertices, accuracy on the rest, mean over `eval_splits` random splits;
    `link_prediction_accuracy`: Hadamard features `w_u * w_v` of the L2-normalised rows (unscaled rows are too
    small for LogisticRegression(C=1), which then predicts one class: spec C8 leaves scaling open) of the
    held-out edges and as many sampled non-edges
    (datasets/graphs.py `link_split`: the embedding was fitted on the residual graph and never saw them),
    LogisticRegression(C=1) trained on `train_ratio` of the pairs, same averaging. Both classifiers are solved for
    all splits at once (`_accuracy_over_splits`)."""
    from sklearn.preprocessing import normalize

    card = train.meta.get("card", {})
    graph, W = train.meta["graph"], normalize(np.asarray(plugin.embedding, dtype=np.float64))
    ratio, splits = float(card.get("train_ratio", 0.1)), int(card.get("eval_splits", 1))
    if graph.pairs is None:
        acc = _accuracy_over_splits(W, np.asarray(train.y), ratio, splits, "svm", rng)
        return {"vertex_classification_accuracy": acc}
    feats = W[graph.pairs[:, 0]] * W[graph.pairs[:, 1]]
    acc = _accuracy_over_splits(feats, graph.pair_labels, ratio, splits, "lr", rng)
    return {"link_prediction_accuracy": acc}


def semi_supervised(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    """fair_sampling.md §0 / §7: accuracy, `discrimination` = |P(yhat=1 | z=0) - P(yhat=1 | z=1)| of the final
    (ensemble) predictions on the test rows, the four (z, yhat) test counts and, for a plugin that pseudo-labels
    (`pseudo_rows`, `pseudo_labels` into its training rows), the pseudo-label noise per group against the hidden
    true labels (`train` is the runner's copy with them): `noise_protected` = N_{1,p}, `noise_unprotected` =
    N_{0,p}, `noise_gap` = N_p. z = 1 (protected) is the card's s = 0."""
    yhat = np.asarray(plugin.predict(test.X)).astype(int)
    out = metrics.classification(test.y, yhat, test.s)
    out["discrimination"] = out["risk_difference_abs"]
    out |= metrics.group_counts(1 - np.asarray(test.s).astype(int), yhat)
    labelled = train.meta["row_labelled"]
    out |= {"n_labelled": int(labelled.sum()), "n_unlabelled": int((~labelled).sum())}
    rows = getattr(plugin, "pseudo_rows", None)
    if rows is not None and len(rows):
        out |= metrics.label_noise(train.y[rows], plugin.pseudo_labels, 1 - train.s[rows].astype(int))
    return out


def attack(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    """adv_fairness.md §7: the plugin (trained on `train`) selects examples of the attacked set `test`, perturbs
    them within its budget and measures IAB, GAB (= the change of the signed demographic-parity gap), the
    perturbation norms and nearest-neighbour distances, and the discrimination before / after."""
    return plugin.attack(test, rng)


EVALUATORS = {"classifier": classifier, "generator": generator, "graph": graph, "embedding": embedding,
              "semi_supervised": semi_supervised, "attack": attack}


def predictions(plugin, test) -> pd.DataFrame:
    """The classifier's test-set predictions, one row per test row."""
    pred = np.asarray(plugin.predict(test.X))
    score = np.full(len(pred), np.nan)
    if hasattr(plugin, "predict_proba"):
        proba = np.asarray(plugin.predict_proba(test.X), dtype=float)
        score = proba if proba.ndim == 1 else proba[np.arange(len(pred)), pred.astype(int)]
    return pd.DataFrame({
        "row_id": test.meta.get("row_id", np.arange(len(pred))),
        "label": np.asarray(test.y),
        "group": pd.array(test.s, dtype="Int64") if test.s is not None else pd.array([pd.NA] * len(pred), "Int64"),
        "score": score,
        "prediction": pred,
    })


def save_predictions(frame: pd.DataFrame, artifacts: Path) -> Path:
    """`predictions.parquet` (pyarrow installed) or `.csv` in the run's artifacts folder, written atomically."""
    try:
        import pyarrow  # noqa: F401

        suffix = "parquet"
    except ImportError:
        suffix = "csv"
    path = Path(artifacts) / f"predictions.{suffix}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, prefix=f".{path.name}.") as tmp:
        tmp.close()
        if suffix == "parquet":
            frame.to_parquet(tmp.name, index=False)
        else:
            frame.to_csv(tmp.name, index=False)
    os.replace(tmp.name, path)
    return path


def read_predictions(run_dir: Path) -> pd.DataFrame:
    """A run's saved predictions, whichever format they were written in."""
    folder = Path(run_dir) / "artifacts"
    if (folder / "predictions.parquet").is_file():
        return pd.read_parquet(folder / "predictions.parquet")
    return pd.read_csv(folder / "predictions.csv")
