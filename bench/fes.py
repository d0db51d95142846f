"""FES family: one `fes` run with K = 200 base models on Adult (rho = 1), LR and linear SVM: the K models fitted
together (`batched_linear.fit_indexed`, one batched Newton solve) against K scikit-learn fits on the same
re-sampled sets (`LogisticRegression(C=1)` / `LinearSVC(C=1)`, the baseline, measured in this process).

Prints seconds per step and the ratio; the issue's target is the Fig. 4.2 grid in under 30 minutes on 2 cores,
i.e. well under a second per FES run (not measured here: the grid is not run by `make bench`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from privfair_cli import datasets as data_lib
from privfair_cli.algorithms import batched_linear, kamiran_calders

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "data"


def sklearn_fits(X, y, idx, model: str) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    out = []
    for rows in idx:  # the baseline: one scikit-learn fit per re-sampled set
        clf = LogisticRegression(C=1.0, max_iter=1000) if model == "lr" else LinearSVC(C=1.0, max_iter=5000)
        clf.fit(X[rows], y[rows])
        out.append(np.r_[clf.coef_[0], clf.intercept_])
    return np.array(out)


def one_run(name: str = "adult_ssl", k: int = 200, seed: int = 0) -> None:
    card = OmegaConf.to_container(OmegaConf.load(CONFIGS / f"{name}.yaml"))
    if not (Path(os.environ.get("PRIVFAIR_DATA_DIR", "")) / card["subdir"]).is_dir():
        print(f"{name}: dataset folder not found under PRIVFAIR_DATA_DIR, skipped")
        return
    rng = np.random.default_rng(seed)
    table = data_lib.load(card)
    train, _ = data_lib.split(table, card["test_size"], rng, card["unlabelled_size"])
    X, s = train.X, train.s.astype(int)
    for model in ("lr", "svm"):
        labelled = train.meta["row_labelled"]
        w0 = batched_linear.fit_indexed(X, train.y, np.flatnonzero(labelled)[None], model, 1.0)
        y = np.where(labelled, train.y, batched_linear.decision(X, w0)[:, 0] >= 0).astype(int)  # pseudo labels
        size = int(np.bincount(2 * s + y, minlength=4).min())
        t0 = time.perf_counter()
        idx = kamiran_calders.balanced(s, y, size, k, rng)
        t1 = time.perf_counter()
        W = batched_linear.fit_indexed(X, y, idx, model, 1.0)
        t2 = time.perf_counter()
        W_ref = sklearn_fits(X, y, idx, model)
        t3 = time.perf_counter()
        agree = np.mean((batched_linear.decision(X, W) >= 0) == (batched_linear.decision(X, W_ref) >= 0))
        print(f"{name} {model}: n={len(X)} d={X.shape[1]} K={k} sets of {4 * size} rows: sampling {t1 - t0:.2f} s, "
              f"batched fit {t2 - t1:.2f} s, {k} sklearn fits {t3 - t2:.2f} s ({(t3 - t2) / (t2 - t1):.1f}x the "
              f"batched fit); predictions agree on {agree:.4%} of the rows")


def main() -> None:
    one_run()


if __name__ == "__main__":
    main()
