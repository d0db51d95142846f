"""Evaluation: the one place that turns a fitted plugin into metrics (`metrics_for`). The evaluation of a plugin's
task kind (`EVALUATORS`: each gets the fitted plugin, the train / test tables and the run's "eval" stream and returns
flat metric name -> number), or the family evaluation the plugin names in `evaluation`; then every metric set it
lists in `metric_sets` (`METRIC_SETS`: the metrics a family's spec adds), and `causal_release` for any release on a
card with a causal graph; then the split's sizes and the plugin's `extra_metrics()` (numbers it computed while
fitting). Plugins compute no test metric: they expose what they fitted (predictions, scores, the release, histories)
and the functions here measure it.

Graph runs are scored on the skeleton (`metrics.graph_recovery`, privpc.md §1.5) against the data's generating
graph (`meta["true_adjacency"]`) or, for data without one (Adult), against the plugin's non-private reference
graph (`reference_graph(data)`, PC on the same data, §4.6.3). The reference is cached on disk under
`<cache>/reference/` (the data cache's root, `$PRIVFAIR_CACHE_DIR` or `~/.cache/privfair`), keyed by the
data's content and the plugin's `reference_settings()`, so it is computed once per dataset and setting.

Classifier runs also save their test-set predictions (`save_predictions`, on by default; issue 12 item 8) as
`artifacts/predictions.parquet` when pyarrow is installed, else `artifacts/predictions.csv`: one row per test
row with `row_id` (its position in the dataset as loaded), `label`, `group` (the sensitive attribute s, empty
without one), `score` (the predicted probability of the label 1, or of the predicted class for more than two
classes; empty for a plugin without `predict_proba`) and `prediction`, then one column per sensitive attribute
of the card (`data.sensitive` and `roles.protected`, their values as in the data; a name clashing with the columns
before is written `attribute_<name>`), so that any metric can be recomputed later (fairlearn, AIF360), for any
grouping.

Classifier evaluations add `group_block`: the rates of every group of `data.sensitive` (more than two values, or an
intersection), the k-group gaps and 95 % bootstrap intervals of every gap and accuracy (`metrics.group_metrics`,
docs/groups.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from privfair_cli import downstream, metrics
from privfair_cli.datasets import cache_root, read_cache, write_cache
from privfair_cli.errors import DataError

REFERENCE_CACHE_VERSION = 1


def classifier(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    yhat = plugin.predict(test.X)
    return metrics.classification(test.y, yhat, test.s) | group_block(test, yhat)


def groups_of(table) -> metrics.Groups | None:
    """The groups of the table's sensitive attribute(s) as the loader carries them (datasets/tabular.py), else the
    two values of its binary s (`s=0`, `s=1`; a loader that reads its own columns), else None."""
    meta = table.meta
    if "row_group" in meta and "group_labels" in meta:  # a view that rebuilds the table keeps only the row keys
        return metrics.Groups(meta["group_attribute"], tuple(meta["group_labels"]), meta["row_group"],
                              int(meta["group_reference"]))
    if table.s is None:
        return None
    return metrics.Groups("s", ("s=0", "s=1"), np.asarray(table.s).astype(np.int64), 1)


def group_block(test, yhat) -> dict[str, float]:
    """Every group's rates, the k-group gaps and the bootstrap intervals of predictions `yhat` on the test rows
    (`metrics.group_metrics`; docs/groups.md)."""
    return metrics.group_metrics(test.y, yhat, groups_of(test), test.s)


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
    held-out edges and as many sampled non-edges (datasets/graphs.py `link_split`: the embedding was fitted on the
    residual graph and never saw them; with `data.link_holdout: 0`, the spec's protocol, of every edge of the graph
    it was fitted on, which the run's warnings say),
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
    out = metrics.classification(test.y, yhat, test.s) | group_block(test, yhat)
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


def description(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    """A dataset's sizes (the `describe` plugin counts them: algorithms/describe.py)."""
    return plugin.describe(train, test)


EVALUATORS = {"classifier": classifier, "generator": generator, "graph": graph, "embedding": embedding,
              "semi_supervised": semi_supervised, "attack": attack, "description": description}
METRIC_SETS: dict[str, Callable[..., dict[str, float]]] = {}


def evaluator(name: str):
    """Register a family evaluation that replaces its kind's (a plugin names it in `evaluation`)."""
    def add(fn):
        EVALUATORS[name] = fn
        return fn
    return add


def metric_set(name: str):
    """Register the metrics a family adds to its evaluation, `fn(plugin, train, test, rng, seed)` (a plugin lists
    them in `metric_sets`)."""
    def add(fn):
        METRIC_SETS[name] = fn
        return fn
    return add


def metrics_for(plugin, train, test, rng: np.random.Generator, seed: int = 0) -> dict[str, float]:
    """A fitted plugin's metrics: its evaluation (its `evaluation`, else its kind's), its `metric_sets` in order
    (`causal_release` after them for a release on a card with a causal graph), the sizes `n_train`, `n_test`, `d`,
    and its `extra_metrics()`. `rng` is the run's "eval" stream, `seed` the run's seed (what `causal_release` seeds
    its classifiers with)."""
    out = EVALUATORS[plugin.evaluation or plugin.kind](plugin, train, test, rng)
    sets = tuple(plugin.metric_sets)
    if plugin.kind == "generator" and "causal_graph" in train.meta:
        sets += ("causal_release",)
    for name in sets:
        out |= METRIC_SETS[name](plugin, train, test, rng, seed)
    out |= {"n_train": len(train), "n_test": len(test), "d": train.d}
    return out | plugin.extra_metrics()


# ---------------------------------------------------------------------------------------------- family evaluations
@evaluator("correlated_release")
def correlated_release(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    """crfs.md §0.5: `n_records` and, for the model tasks (`model_predictions`), the mean and std of the test
    accuracy over the released models' draws and the accuracy of the non-private model (the query tasks' errors
    are fit-time numbers, the plugin's `extra_metrics()`)."""
    out = {"n_records": float(len(train) + len(test))}
    predicted = plugin.model_predictions(test.X)
    if predicted is not None:
        private, nonprivate = predicted
        y = (np.asarray(test.y) == 1)[:, None]
        acc = np.mean(private == y, axis=0)
        out |= {"accuracy": float(acc.mean()), "accuracy_std": float(acc.std()),
                "accuracy_nonprivate": float(np.mean(nonprivate[:, None] == y, axis=0)[0])}
    return out


@evaluator("group_accuracy")
def group_accuracy(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    """dpsgd.md §5: the classifier metrics (binary labels), the accuracy of each of the plugin's K groups, the
    cost of privacy per group against its non-private reference model (Definition 17, `cost_of_privacy`), and
    the per-epoch history on the test rows (`plugin.watch`)."""
    from privfair_cli.algorithms.dpsgd import group_accuracy as by_group

    yhat = plugin.predict(test.X)
    out = metrics.classification(test.y, yhat, test.s) | group_block(test, yhat) if plugin.binary else {}
    k = plugin.groups.of_rows(test)
    out |= by_group(test.y, yhat, k, plugin.groups)
    reference = plugin.reference_predict(test.X)
    if reference is not None:
        out |= cost_of_privacy(out, by_group(test.y, reference, k, plugin.groups), plugin.groups)
    plugin.watch("test", test)
    return out


EQUAL_COST_TAU = 0.05  # dpsgd.md §5: "equal costs of privacy" when the utility-loss gap is at most tau


def cost_of_privacy(own: dict[str, float], ref: dict[str, float], groups) -> dict[str, float]:
    """Definition 17: accuracy (total and per group) minus the sgd model's, and the inequality in utility loss
    between the compared groups, `equal_costs` when it is at most EQUAL_COST_TAU."""
    out = {}
    for key, value in ref.items():
        out[f"sgd_{key}"] = value
        out[key.replace("accuracy", "accuracy_diff_vs_sgd", 1)] = own[key] - value
    if groups.compare is not None:
        i, j = (groups.names[g] for g in groups.compare)
        gap = abs(out[f"accuracy_diff_vs_sgd_{i}"] - out[f"accuracy_diff_vs_sgd_{j}"])
        out["utility_loss_gap"] = gap
        out["equal_costs"] = float(gap <= EQUAL_COST_TAU)
    return out


@evaluator("fair_linear")
def fair_linear(plugin, train, test, rng: np.random.Generator) -> dict[str, float]:
    """fair_ssl.md §0.3: the labelled / unlabelled counts, test accuracy, the four gaps between the groups
    (`discrimination_gaps`) and `discrimination` = the one the plugin's `fairness` names; every number N/A (NaN)
    where the plugin's w-step solver failed (`plugin.failed`, spec §8.9)."""
    from privfair_cli.algorithms.fair_ssl import FAIRNESS

    labelled = train.meta["row_labelled"]
    out = {"n_labelled": int(labelled.sum()), "n_unlabelled": int((~labelled).sum())}
    if plugin.failed is not None:
        nan = float("nan")
        return out | {"accuracy": nan, "discrimination": nan} | {f"dis_{f}": nan for f in FAIRNESS}
    yhat = plugin.predict(test.X)
    gaps = discrimination_gaps(test.y, yhat, test.s)
    out |= {"accuracy": float(np.mean(yhat == np.asarray(test.y).astype(int)))} | gaps
    out["discrimination"] = gaps[f"dis_{plugin.cfg.fairness}"]
    return out


def discrimination_gaps(y: np.ndarray, yhat: np.ndarray, s: np.ndarray) -> dict[str, float]:
    """fair_ssl.md §0.3 gaps between the groups from the shared GroupRates: DI (positive rate), OMR (error rate),
    FPR, FNR."""
    gr = metrics.GroupRates(np.asarray(y).astype(int), np.asarray(yhat).astype(int), np.asarray(s).astype(int))
    return {"dis_di": abs(gr.difference("positive_rate")), "dis_omr": abs(gr.difference("accuracy")),
            "dis_fpr": abs(gr.difference("fpr")), "dis_fnr": abs(gr.difference("tpr"))}


# ---------------------------------------------------------------------------------------------- metric sets
@metric_set("stopping_rules")
def stopping_rules(plugin, train, test, rng: np.random.Generator, seed: int) -> dict[str, float]:
    """early_stopping.md: per stopping rule and fairness metric (`plugin.stops()`, read off the per-epoch
    validation and test histories), `<rule>_{stop_epoch, accuracy, discrimination, afp, eps}_<fairness>`."""
    out = {}
    for r in plugin.stops():
        for name in ("stop_epoch", "accuracy", "discrimination", "afp", "eps"):
            out[f"{r['rule']}_{name}_{r['fairness']}"] = float(r[name])
    return out


@metric_set("fair_data")
def fair_data(plugin, train, test, rng: np.random.Generator, seed: int) -> dict[str, float]:
    """fairgan.md §7 of a FairGAN-family release (`plugin.synthetic`, one-hot through `plugin.enc`): the data
    metrics against the real training table (`fair_data_metrics`, the plugin's `ber_eval`), and the classifier on
    the real test rows: the generator's co-trained classifier (`plugin.eta_predict`), else downstream LR
    (max_iter=2000) trained on the release (C3), with `rd_clf` = its risk difference; `x_dims` = the one-hot
    width."""
    enc = plugin.enc
    Xs, ys, ss = enc.xys(plugin.synthetic)
    out = fair_data_metrics(Xs, ys, ss, enc.onehot(train.frame), train.y, train.s, plugin.cfg.ber_eval)
    Xt = enc.onehot(test.frame)
    yhat = plugin.eta_predict(Xt)
    if yhat is None:
        yhat = downstream.fit_predict("lr", Xs, ys, Xt, lr_max_iter=2000)
    out |= metrics.classification(test.y, yhat, test.s)
    return out | {"rd_clf": out["risk_difference"], "x_dims": enc.dim}


def fair_data_metrics(Xs, ys, ss, Xr, yr, sr, ber_eval: str = "same") -> dict[str, float]:
    """fairgan.md §7 data metrics of a table (Xs, ys, ss) against the real one: `rd_data` (its own
    P(y=1|s=1) - P(y=1|s=0)), `ber` (LinearSVC(C=1) predicting s from x, fitted on the table and scored on it,
    `ber_eval: same`, or on the real table, `real`), `dist_xy`, `dist_xys` (`metrics.pmf_distance`)."""
    from sklearn.svm import LinearSVC

    ys, ss = np.asarray(ys).astype(int), np.asarray(ss).astype(int)
    out = {"rd_data": metrics.GroupRates(ys, ys, ss).difference("positive_rate")}
    if len(np.unique(ss)) < 2:
        out["ber"] = float("nan")
    else:
        svm = LinearSVC(C=1.0).fit(Xs, ss)
        Xe, se = (Xs, ss) if ber_eval == "same" else (Xr, np.asarray(sr).astype(int))
        out["ber"] = metrics.ber(se, svm.predict(Xe))
    real_xy = np.column_stack([Xr, yr])
    synth_xy = np.column_stack([Xs, ys])
    out["dist_xy"] = metrics.pmf_distance(real_xy, synth_xy)
    out["dist_xys"] = metrics.pmf_distance(np.column_stack([real_xy, sr]), np.column_stack([synth_xy, ss]))
    return out


@metric_set("rd_clf")
def rd_clf(plugin, train, test, rng: np.random.Generator, seed: int) -> dict[str, float]:
    """fairgan.md §7: `rd_clf`, the classifier's risk difference on the test rows (the key the tables use)."""
    yhat = np.asarray(plugin.predict(test.X)).astype(int)
    rates = metrics.GroupRates(np.asarray(test.y).astype(int), yhat, np.asarray(test.s).astype(int))
    return {"rd_clf": rates.difference("positive_rate")}


@metric_set("real_data")
def real_data(plugin, train, test, rng: np.random.Generator, seed: int) -> dict[str, float]:
    """fairgan.md D1-Real: the real training table's own `rd_data` and `ber` (dist is N/A for the real data)."""
    real = fair_data_metrics(train.X, train.y, train.s, train.X, train.y, train.s)
    return {"rd_data": real["rd_data"], "ber": real["ber"]}


@metric_set("classifier_panel")
def classifier_panel(plugin, train, test, rng: np.random.Generator, seed: int) -> dict[str, float]:
    """ffpdg.md §7 on the plugin's `release` (integer codes, `columns`, `domain`, the outcome column `y_col`, the
    pre-processor's row `weights`): the eight classifiers of `downstream.panel_metrics` trained on it and tested
    on the real test rows, `lrd` against the real training rows (`metrics.lrd`), and where the release has two
    groups of the protected column `s_col` and a positive row, its `statistical_rate` and
    `representation_rate`."""
    from privfair_cli.algorithms import preprocess

    cfg, release, domain, y_col = plugin.cfg, plugin.release, plugin.domain, plugin.y_col
    feats = [j for j in range(len(plugin.columns)) if j != y_col]
    dom = [domain[j] for j in feats]
    names = [cfg.classifiers] if isinstance(cfg.classifiers, str) else list(cfg.classifiers)
    out = downstream.panel_metrics(preprocess.features(release[:, feats], dom), release[:, y_col], plugin.weights,
                                   preprocess.features(test.frame.to_numpy(np.int64)[:, feats], dom),
                                   np.asarray(test.y).astype(int), np.asarray(test.s).astype(int), names, rng,
                                   cfg.compress_rows)
    real = preprocess.features(train.frame.to_numpy(np.int64), domain)
    out["lrd"] = metrics.lrd(real, preprocess.features(release, domain), rng, cfg.lrd_folds)
    y_rel = release[:, y_col]
    if plugin.s_col is not None:
        s_rel = release[:, plugin.s_col]
        if len(np.unique(s_rel)) == 2 and y_rel.any():
            out["statistical_rate"] = preprocess.statistical_rate(y_rel, s_rel)
            out["representation_rate"] = preprocess.representation_rate(s_rel)
    return out


@metric_set("causal_release")
def causal_release(plugin, train, test, rng: np.random.Generator, seed: int) -> dict[str, float]:
    """cfgan.md §4 of any release (`plugin.synthetic`) on a card with a causal graph (`release_effects`)."""
    return release_effects(train, plugin.synthetic, seed)


def release_effects(real, synth: pd.DataFrame, seed: int = 0, te_estimator: str = "adjust",
                    chi2_expected: str = "two_sample") -> dict[str, float]:
    """cfgan.md §4 of a released binary table against the real one (`real.meta["causal_graph"]`): the effects of
    `causal_effects.effect_metrics`, `chi2` (B8), and `acc_svm`, `acc_dt`, `acc_lr`, `acc_rf`: the downstream
    classifiers (`downstream.fit_predict`, seeded with `seed`) trained on the release's non-Y nodes and tested on
    the whole real table (B9), both tables collapsed to distinct rows weighted by their counts."""
    from privfair_cli.algorithms import causal_effects as ce

    g = ce.CausalGraph.from_spec(real.meta["causal_graph"], list(real.frame.columns))
    Vr, Vs = ce.as_matrix(real.frame, g), ce.as_matrix(synth, g)
    out = ce.effect_metrics(synth, g, te_estimator)
    out["chi2"] = ce.chi2(Vr, Vs, chi2_expected)
    y = g.index[g.outcome]
    feats = [i for i in range(len(g.nodes)) if i != y]
    rows, w = np.unique(Vs, axis=0, return_counts=True)
    test_rows, test_w = np.unique(Vr, axis=0, return_counts=True)
    w, test_w = w.astype(float), test_w.astype(float)
    for kind in ("svm", "dt", "lr", "rf"):
        pred = downstream.fit_predict(kind, rows[:, feats], rows[:, y], test_rows[:, feats], seed, weights=w)
        out[f"acc_{kind}"] = float(((pred == test_rows[:, y]) * test_w).sum() / test_w.sum())
    return out


def predictions(plugin, test) -> pd.DataFrame:
    """The classifier's test-set predictions, one row per test row."""
    pred = np.asarray(plugin.predict(test.X))
    score = np.full(len(pred), np.nan)
    if hasattr(plugin, "predict_proba"):
        proba = np.asarray(plugin.predict_proba(test.X), dtype=float)
        score = proba if proba.ndim == 1 else proba[np.arange(len(pred)), pred.astype(int)]
    frame = pd.DataFrame({
        "row_id": test.meta.get("row_id", np.arange(len(pred))),
        "label": np.asarray(test.y),
        "group": pd.array(test.s, dtype="Int64") if test.s is not None else pd.array([pd.NA] * len(pred), "Int64"),
        "score": score,
        "prediction": pred,
    })
    codes = test.meta.get("row_attributes")
    for j, col in enumerate(test.meta.get("attribute_columns", []) if codes is not None else []):
        name = col if col not in frame.columns else f"attribute_{col}"
        frame[name] = np.asarray(test.meta["attribute_levels"][j], dtype=object)[codes[:, j]]
    return frame


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
