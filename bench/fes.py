"""FES family.

`one_run`: one `fes` fit with K = 200 base models on Adult (rho = 1), LR and linear SVM: the K models fitted
together (`batched_linear.fit_indexed`, one batched Newton solve) against K scikit-learn fits on the same
re-sampled sets (`LogisticRegression(C=1)` / `LinearSVC(C=1)`, the baseline, measured in this process).

`grid`: the Fig. 4.2 grid (Health substitute, Bank, Adult x LR, SVM x rho 0.1 ... 1.0 x RUNS runs, K = 200) run the
way `privfair reproduce zhang2022_fig4_2` runs each point (the runner's data streams and split, the `fes` plugin,
its ensemble predictions on the test split), in WORKERS processes, one task per (dataset, run): a task loads and
splits once and fits its 2 x 10 points. Within a point the K models are one batched solve; the runs and rho values
are not merged into one solve, because a point's cost is its K (d + 1)^2 Hessians per Newton step, which batching
does not reduce. `python -m bench.fes grid RUNS WORKERS` (default 50 runs, 2 workers: the issue's grid, 3,000 FES
fits). It prints wall and user + sys CPU seconds (of the workers, measured after they exit): on a shared machine the
CPU seconds / WORKERS is the honest idle-machine estimate of the wall time.

`make bench` (`main`) runs `one_run`, then the grid with $BENCH_FES_RUNS runs (default 50, the issue's grid: about
20 minutes on 2 idle cores) on $BENCH_FES_WORKERS workers (default 2); BENCH_FES_RUNS=0 leaves the grid out.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import numpy as np

from privfair_cli import datasets as data_lib
from privfair_cli.algorithms import batched_linear, kamiran_calders


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
    from privfair_cli.config import load_card

    card = load_card(name)
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


DATASETS = ("health_ssl", "bank_ssl", "adult_ssl")
RHOS = tuple(round(0.1 * i, 1) for i in range(1, 11))


def grid_task(task: tuple[str, int]) -> list[dict]:
    """One run (seed) of one dataset: both models x the ten rho values, K = 200."""
    from privfair_cli import registry, runner, schema
    from privfair_cli.config import load_card
    from privfair_cli.privacy import Budget

    name, seed = task
    card = schema.validate_card(load_card(name))
    prepared = runner.prepare(card, seed, log=lambda *_: None)
    train, test = prepared.train, prepared.test
    out = []
    for model in ("lr", "svm"):
        for rho in RHOS:
            t0 = time.perf_counter()
            plugin = registry.make("fes", None, model=model, rho=rho)
            runner.fit_plugin(plugin, train, Budget(1.0, 0.0), runner.streams(seed)["noise"])
            pred = plugin.predict(test.X)
            out.append({"data": name, "seed": seed, "model": model, "rho": rho, "seconds": time.perf_counter() - t0,
                        "accuracy": float((pred == test.y).mean())})
    return out


def grid(runs: int = 50, workers: int = 2) -> None:
    from multiprocessing import get_context

    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # one thread per worker: the workers share the cores
    tasks = [(name, seed) for seed in range(runs) for name in DATASETS]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    pool = get_context("spawn").Pool(workers)
    try:
        rows = [r for part in pool.imap_unordered(grid_task, tasks) for r in part]
        pool.close()
    finally:
        pool.terminate()
        pool.join()  # the workers are reaped here: their CPU seconds are in RUSAGE_CHILDREN from now on
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    per = {}
    for r in rows:
        per.setdefault(r["data"], []).append(r["seconds"])
    print(f"Fig. 4.2 grid: {len(rows)} FES fits (3 datasets x 2 models x 10 rho x {runs} runs, K = 200) in "
          f"{wall:.0f} s wall with {workers} workers; mean seconds per fit: "
          + ", ".join(f"{k} {np.mean(v):.2f}" for k, v in per.items())
          + f"; workers' CPU: user {user:.0f} s + sys {system:.0f} s = {user + system:.0f} s, i.e. "
          f"{(user + system) / workers / 60:.1f} min on {workers} idle cores (target: the 50-run grid under 30 min)"
          + ("" if runs == 50 else f"; scaled to 50 runs: {(user + system) * 50 / runs / workers / 60:.1f} min"))


def main() -> None:
    one_run()
    runs = int(os.environ.get("BENCH_FES_RUNS", "50"))
    if runs > 0:
        grid(runs, int(os.environ.get("BENCH_FES_WORKERS", "2")))


if __name__ == "__main__":  # python -m bench.fes grid [RUNS [WORKERS]]
    import sys

    if sys.argv[1:2] == ["grid"]:
        grid(*(int(a) for a in sys.argv[2:4]))
    else:
        main()
