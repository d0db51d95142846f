"""FFPDG family: one `ffpdg` release (FairMaxEnt, then RON-Gauss) of Adult in the small domain (adult_ffpdg,
48,842 rows) at eps = 1, end to end but release only; the evaluation (eight classifiers + LRD) is timed apart.

Prints the median release time over 5 repetitions, its parts (FairMaxEnt fit and sampling, RON-Gauss), and the
ratio to a baseline measured in this process: one pass of the exact (non-private) second-moment matrix X^T X
of the encoded table, the least work any Gaussian generator does. Target (issue 17): under 1 s (the seed reports
1 s on an AWS ml.p2.16xlarge).

Then the GAN generators per epoch on the same rows (one run each, single-threaded torch), as a ratio to the ffpdg
release above: DP-WGAN one epoch = round(n / 64) critic steps (Poisson batches, per-example clipping, noise) with
their generator steps; PATE-GAN one teacher epoch = the rounds in which each teacher sees its part once
(ceil(n / 10 / (64 * 5)) rounds), at lambda = 0.001 so that labels are released (at the spec's lambda = 1 the
accountant stops it before the first label).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from privfair_cli import datasets as data_lib
from privfair_cli import evaluate, registry
from privfair_cli.algorithms import dpwgan, pategan, preprocess, ron_gauss
from privfair_cli.config import load_card
from privfair_cli.privacy import Budget, PrivacyLedger

REPS = 5


def main() -> None:
    card = load_card("adult_ffpdg")
    if not (Path(os.environ.get("PRIVFAIR_DATA_DIR", "")) / card["subdir"]).is_dir():
        print("adult_ffpdg: dataset folder not found under PRIVFAIR_DATA_DIR, skipped")
        return
    table = data_lib.load(card)
    X = table.frame.to_numpy(np.int64)
    domain = [int(table.domain[c]) for c in table.frame.columns]
    F = preprocess.features(X, domain)
    t0 = time.perf_counter()
    for _ in range(REPS):
        _ = F.T @ F
    base = (time.perf_counter() - t0) / REPS
    budget = Budget(1.0, 0.0)
    releases, parts = [], []
    plugin = None
    for seed in range(REPS):
        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        plugin = registry.make("ffpdg", cov_sensitivity="seed").fit(table, budget, PrivacyLedger(budget), rng)
        releases.append(time.perf_counter() - t0)
        t1 = time.perf_counter()
        fit = preprocess.fairmaxent_fit(X, domain, 1, 4)
        t2 = time.perf_counter()
        Z = fit.grid[rng.choice(len(fit.p), size=len(X), p=fit.p)]
        t3 = time.perf_counter()
        ron_gauss.generate(Z, domain, 4, len(Z), 1.0, ron_gauss.Settings(cov_sensitivity="seed"), rng,
                           PrivacyLedger(budget))
        parts.append((t2 - t1, t3 - t2, time.perf_counter() - t3))
    release = float(np.median(releases))
    fit_s, sample_s, rg_s = np.median(np.array(parts), axis=0)
    t0 = time.perf_counter()
    metrics = evaluate.metrics_for(plugin, table, table, np.random.default_rng(0))
    evaluation = time.perf_counter() - t0
    print(f"adult_ffpdg: n={len(X)} |Omega|={int(np.prod(domain))} eps=1: ffpdg release {release:.3f} s median of "
          f"{REPS} (FairMaxEnt fit {fit_s:.3f} s, sampling {sample_s:.3f} s, RON-Gauss {rg_s:.3f} s); "
          f"{release / base:.0f}x one exact X^T X ({base * 1e3:.2f} ms); target < 1 s: "
          f"{'met' if release < 1 else 'NOT met'}")
    print(f"  evaluation apart: {evaluation:.2f} s (8 classifiers + LRD; aucroc={metrics['aucroc']:.3f}, "
          f"lrd={metrics['lrd']:.3f})")
    gans(X, domain, release)


def gans(X: np.ndarray, domain: list[int], release: float) -> None:
    n = len(X)
    steps = max(1, round(n / 64))
    budget = Budget(1.0, 1e-5)
    t0 = time.perf_counter()
    dpwgan.generate(X, domain, n, 1.0, 1e-5, dpwgan.Settings(max_steps=steps), np.random.default_rng(0),
                    PrivacyLedger(budget))
    wgan = time.perf_counter() - t0
    rounds = -(-(n // 10) // (64 * 5))
    t0 = time.perf_counter()
    _, labels = pategan.generate(X, domain, n, 1.0, 1e-5, pategan.Settings(lam=0.001, max_rounds=rounds),
                                 np.random.default_rng(0), PrivacyLedger(budget))
    pate = time.perf_counter() - t0
    print(f"  DP-WGAN: {wgan:.2f} s per epoch ({steps} critic steps, {wgan / steps * 1e3:.1f} ms per step, "
          f"{steps // 5} generator steps), {wgan / release:.0f}x the ffpdg release")
    print(f"  PATE-GAN: {pate:.2f} s per teacher epoch ({rounds} rounds, {labels} noisy labels), "
          f"{pate / release:.0f}x the ffpdg release")


if __name__ == "__main__":
    main()
