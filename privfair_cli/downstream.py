"""Downstream evaluation of a released (synthetic) table, shared by every generator family (prefair.md §9 items
4-5; the same protocol serves FairGAN, FFPDG, ...): classifiers trained on the synthetic table and tested on real
data, their accuracy and fairness gaps.

A generator plugin opts in by making its `Config` a subclass of `ReleaseEvaluation` (the keys `max_cells`,
`classifiers`, `mlp_epochs`, `rf_trees`, defaults in its YAML); `evaluate.generator` then adds these metrics to the
release metrics. Protocol (the PreFair reference code's, A15): features are every attribute but the outcome, as raw
integer codes; "linear regression" and "random forest" are regressors on the 0/1 label, rounded (predictions
clipped to [0, 1] first); the MLP is the reference code's Keras net rebuilt in numpy.

`mlp_inputs`: `raw` feeds the MLP the integer codes as they are (the reference code's protocol, A15); `standardised`
centres and scales each feature by the training (released) table's own mean and std, applied to the test rows
too. On Census KDD the raw codes span 0..123,231 (`unknown`, the instance weight) and 0..1,674 (stock_dividends):
with He-normal weights the first layer's pre-activations are in the tens of thousands, the 20-epoch Adam run ends
at a net that predicts (almost) no positive on the real table, and every fairness gap is 0 / 0
(docs/families/prefair.md, "KDD evaluation MLP"). The statistics come from the synthetic table, so the real
table's privacy is not touched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from privfair_cli import metrics
from privfair_cli.errors import DataError
from privfair_cli.typed import bounds

Classifier = Literal["mlp", "lr", "rf"]

# The reference code's Keras MLP (prefair.md §9 item 4): layer widths after the input, batch size, and Adam with
# Keras' default learning rate, moment decays and epsilon.
MLP_HIDDEN = (20, 20, 10, 5)
MLP_BATCH = 50
ADAM_LR, ADAM_BETA1, ADAM_BETA2, ADAM_EPS = 1e-3, 0.9, 0.999, 1e-7


@dataclass(frozen=True)
class ReleaseEvaluation:
    """Evaluation keys of a generator's config: TVD / ACD over marginals with at most `max_cells` cells (the
    reference code's 10,000 drops KDD's widest pairs), the downstream classifiers and their sizes."""

    max_cells: int = field(metadata=bounds(gt=0))
    classifiers: list[Classifier] | Classifier
    mlp_epochs: int = field(metadata=bounds(ge=1))
    rf_trees: int = field(metadata=bounds(ge=1))
    mlp_inputs: Literal["raw", "standardised"]

    def classifier_list(self) -> list[str]:
        return [self.classifiers] if isinstance(self.classifiers, str) else list(self.classifiers)


def train_mlp(X: np.ndarray, y: np.ndarray, rng: np.random.Generator, epochs: int):
    """The reference code's Keras MLP: 20-20-10-5-1, ReLU, He-normal weights, zero biases, sigmoid output,
    binary cross-entropy, Adam (Keras defaults), batch 50. Written in numpy: for a net this small the per-step
    overhead of an autograd framework dominates. Returns a 0/1 predictor."""
    sizes = [X.shape[1], *MLP_HIDDEN, 1]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        params += [rng.normal(0, math.sqrt(2 / a), size=(a, b)), np.zeros(b)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    n_layers = len(sizes) - 1
    step = 0
    for _ in range(epochs):
        perm = rng.permutation(len(X))
        for k in range(0, len(X), MLP_BATCH):
            idx = perm[k:k + MLP_BATCH]
            acts = [X[idx]]
            for layer in range(n_layers):
                z = acts[-1] @ params[2 * layer] + params[2 * layer + 1]
                acts.append(np.maximum(z, 0) if layer < n_layers - 1 else z)
            with np.errstate(over="ignore"):  # exp overflow -> inf -> sigmoid 0, which is exact
                grad = (1 / (1 + np.exp(-acts[-1][:, 0])) - y[idx])[:, None] / len(idx)  # d BCE / d logit
            grads = [None] * len(params)
            for layer in reversed(range(n_layers)):
                grads[2 * layer] = acts[layer].T @ grad
                grads[2 * layer + 1] = grad.sum(axis=0)
                if layer:
                    grad = (grad @ params[2 * layer].T) * (acts[layer] > 0)
            step += 1
            corr = math.sqrt(1 - ADAM_BETA2**step) / (1 - ADAM_BETA1**step)
            for p, g, mm, vv in zip(params, grads, m, v, strict=True):
                mm *= ADAM_BETA1
                mm += (1 - ADAM_BETA1) * g
                vv *= ADAM_BETA2
                vv += (1 - ADAM_BETA2) * g * g
                p -= ADAM_LR * corr * mm / (np.sqrt(vv) + ADAM_EPS)

    def predict(Z):
        h = np.asarray(Z, dtype=float)
        for layer in range(n_layers):
            h = h @ params[2 * layer] + params[2 * layer + 1]
            h = np.maximum(h, 0) if layer < n_layers - 1 else h
        return (h[:, 0] > 0).astype(int)

    return predict


def standardiser(X: np.ndarray):
    """z = (x - mean) / std with the mean and std of the training table X (a constant column is only centred)."""
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return lambda Z: (np.asarray(Z, dtype=float) - mean) / std


def train_classifier(kind: str, X, y, rng: np.random.Generator, settings: ReleaseEvaluation):
    """A 0/1 predictor trained on (X, y): the MLP (on standardised inputs with `mlp_inputs: standardised`), or a
    regressor on the 0/1 label whose clipped output is rounded."""
    if kind == "mlp":
        if settings.mlp_inputs == "raw":
            return train_mlp(X, y, rng, settings.mlp_epochs)
        scale = standardiser(X)
        predict = train_mlp(scale(X), y, rng, settings.mlp_epochs)
        return lambda Z: predict(scale(Z))
    if kind == "lr":
        from sklearn.linear_model import LinearRegression

        model = LinearRegression().fit(X, y)
    else:
        from sklearn.ensemble import RandomForestRegressor

        from privfair_cli.threads import thread_cap

        # the trees are seeded, so the forest is the same for any number of worker threads
        model = RandomForestRegressor(n_estimators=settings.rf_trees, n_jobs=thread_cap(),
                                      random_state=int(rng.integers(2**31))).fit(X, y)
    return lambda Z: np.rint(np.clip(model.predict(Z), 0, 1)).astype(int)


def downstream_metrics(synth: pd.DataFrame, test, roles: dict, settings: ReleaseEvaluation,
                       rng: np.random.Generator) -> dict[str, float]:
    """Train on the synthetic table, test on real data (§9 items 4-5). `roles`: attribute names per role
    (`outcome`, `admissible`, in column order). The first classifier also fills the unsuffixed keys (`accuracy`,
    `risk_difference` (signed DP), the gaps); each classifier's numbers are also keyed `<metric>_<classifier>`.
    The gaps are between the card's s = 1 and s = 0; for each attribute in the card's `roles.audit` they are also
    computed between its codes 1 and 0 (rows with other codes left out), keyed `<gap>_<attribute>`: the
    reference code's `S == 1` / `S == 0` comparison applied to a multi-valued protected attribute."""
    outcome = roles["outcome"][0]
    y_real = test.frame[outcome].to_numpy()
    if not np.array_equal(y_real == 1, test.y.astype(bool)):
        raise DataError(f"data={test.name}: the outcome {outcome} must be coded 1 = the card's positive label")
    if test.s is None:
        raise DataError(f"data={test.name}: the fairness metrics need the card's `sensitive` attribute")
    feats = [c for c in synth.columns if c != outcome]
    _, groups = np.unique(test.frame[list(roles["admissible"])].to_numpy(), axis=0, return_inverse=True)
    groups = groups.ravel()
    audit = {}
    for attr in (test.roles or {}).get("audit") or []:
        if attr not in test.frame.columns:
            raise DataError(f"data={test.name}: roles.audit names {attr!r}, not an attribute of its discrete view")
        code = test.frame[attr].to_numpy()
        audit[attr.lower()] = (code <= 1, code == 1)
    out = {}
    for n, kind in enumerate(settings.classifier_list()):
        predict = train_classifier(kind, synth[feats].to_numpy(float), (synth[outcome].to_numpy() == 1).astype(
            float), rng, settings)
        yhat = predict(test.frame[feats].to_numpy(float))
        m = {"accuracy": float(np.mean(yhat == test.y))} | metrics.fairness_gaps(yhat, test.y, test.s, groups)
        m["risk_difference"] = metrics.GroupRates(test.y, yhat, test.s).difference("positive_rate")
        for name, (rows, s) in audit.items():
            gaps = metrics.fairness_gaps(yhat[rows], test.y[rows], s[rows], groups[rows])
            m |= {f"{k}_{name}": v for k, v in gaps.items()}
        out |= {f"{k}_{kind}": v for k, v in m.items()}
        if n == 0:
            out |= m
    return out


# ---------------------------------------------------------------------------------------------- 8-classifier panel
PANEL = ("lr", "rf", "mlp", "gnb", "gb", "bnb", "dt", "lda")  # ffpdg.md §7, scikit-learn defaults


def panel_model(name: str, seed: int, lr_max_iter: int = 1000):
    """A scikit-learn classifier with its defaults: one of the eight of ffpdg.md §7 (LR with max_iter=
    `lr_max_iter`), or `svm`, LinearSVC(C=1) (cfgan.md §4)."""
    from sklearn import discriminant_analysis, ensemble, linear_model, naive_bayes, neural_network, svm, tree

    return {
        "svm": lambda: svm.LinearSVC(C=1.0),
        "lr": lambda: linear_model.LogisticRegression(max_iter=lr_max_iter),
        "rf": lambda: ensemble.RandomForestClassifier(random_state=seed),
        "mlp": lambda: neural_network.MLPClassifier(random_state=seed),
        "gnb": lambda: naive_bayes.GaussianNB(),
        "gb": lambda: ensemble.GradientBoostingClassifier(random_state=seed),
        "bnb": lambda: naive_bayes.BernoulliNB(),
        "dt": lambda: tree.DecisionTreeClassifier(random_state=seed),
        "lda": lambda: discriminant_analysis.LinearDiscriminantAnalysis(),
    }[name]()


def fit_predict(name: str, X, y, X_test, seed: int = 0, weights=None, lr_max_iter: int = 1000) -> np.ndarray:
    """Predictions on `X_test` of the classifier `name` (`panel_model`) trained on (X, y), with `weights` as its
    `sample_weight`: the downstream classifiers of FairGAN (LR, C3) and CFGAN (SVM, DT, LR, RF, B9). A one-class
    training table predicts that class."""
    y = np.asarray(y)
    if len(np.unique(y)) < 2:
        return np.full(len(X_test), int(y[0]) if len(y) else 0)
    model = panel_model(name, seed, lr_max_iter)
    model = model.fit(X, y) if weights is None else model.fit(X, y, sample_weight=weights)
    return model.predict(X_test).astype(int)


def panel_metrics(X, y, weights, X_test, y_test, s_test, names, rng: np.random.Generator,
                  compress: bool = True) -> dict[str, float]:
    """Train each classifier of `names` on (X, y) (optionally weighted), test on the real test rows: `aucroc` = the
    largest ROC AUC (predicted probabilities), `dsp` and `deo` = the means over the classifiers
    (`metrics.parity_gaps`, predictions at 0.5), each also keyed `<metric>_<name>`. `compress`: fit on the distinct
    rows with their (weighted) counts as `sample_weight` (exact for a small discrete domain up to the models' own
    randomness; the same rows every classifier shares; LDA, which takes no weights, fits the rows themselves, or a
    resample proportional to the weights). A one-class training table predicts that class
    (AUC 0.5)."""
    import inspect

    from sklearn.metrics import roc_auc_score

    X_full, y_full = np.asarray(X, float), np.asarray(y).astype(int)
    w_full = np.ones(len(y_full)) if weights is None else np.asarray(weights, float)
    X, y, w = X_full, y_full, w_full
    if compress:
        rows, inv = metrics.distinct_rows(np.column_stack([X, y]))
        w = np.bincount(inv.ravel(), weights=w_full, minlength=len(rows))
        X, y = rows[:, :-1], rows[:, -1].astype(int)
    test_rows, test_inv = metrics.distinct_rows(np.asarray(X_test, float))
    out, aucs = {}, []
    for name in names:
        if len(np.unique(y)) < 2:
            score = np.full(len(y_test), float(y[0]) if len(y) else 0.0)
            yhat = score.astype(int)
        else:
            model = panel_model(name, int(rng.integers(2**31)))
            if "sample_weight" in inspect.signature(model.fit).parameters:
                model.fit(X, y, sample_weight=w)
            elif weights is None:  # LDA: no sample_weight, so the rows themselves
                model.fit(X_full, y_full)
            else:  # ... or a resample with probability proportional to the weights
                pick = rng.choice(len(y_full), size=len(y_full), p=w_full / w_full.sum())
                model.fit(X_full[pick], y_full[pick])
            score = model.predict_proba(test_rows)[:, 1][test_inv]
            yhat = model.predict(test_rows).astype(int)[test_inv]
        auc = float(roc_auc_score(y_test, score)) if len(np.unique(y_test)) == 2 else float("nan")
        gaps = metrics.parity_gaps(y_test, yhat, s_test)
        out |= {f"aucroc_{name}": auc, f"dsp_{name}": gaps["dsp"], f"deo_{name}": gaps["deo"]}
        aucs.append(auc)
    out["aucroc"] = float(np.nanmax(aucs))
    out["dsp"] = float(np.mean([out[f"dsp_{n}"] for n in names]))
    out["deo"] = float(np.mean([out[f"deo_{n}"] for n in names]))
    return out
