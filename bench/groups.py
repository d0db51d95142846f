"""Groups and intervals: what the per-group rates and the bootstrap intervals (metrics.group_metrics) add to a
classifier run's evaluation (`evaluate.metrics_for`, what a run's `timings.evaluate` measures), on pflr and lr on
Adult with its binary sex and with its five races. The baseline is the same evaluation in the same process: before
this feature (the binary metrics alone), then with the group rates but no resamples; every figure is the median of
interleaved repetitions. The saved predictions (evaluate.save_predictions, written after the metrics) are timed
apart."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from privfair_cli import evaluate, metrics, registry, runner, schema
from privfair_cli.config import load_card
from privfair_cli.privacy import Budget

REPEATS = 60


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * float(np.median(times))


def measure(algo: str, sensitive: str, repeats: int = REPEATS) -> dict[str, float]:
    """Medians (ms) of metrics_for without group metrics, with them and no resamples, with the intervals; and the
    fit of the same run."""
    card = schema.validate_card(load_card("adult") | {"sensitive": sensitive})
    prepared = runner.prepare(card, 0, log=lambda *_: None)
    plugin = registry.make(algo)
    t = time.perf_counter()
    runner.fit_plugin(plugin, prepared.train, Budget(1.0), prepared.rng["noise"])
    fit = 1000 * (time.perf_counter() - t)
    block, resamples = evaluate.group_block, metrics.BOOTSTRAP_RESAMPLES

    def run(mode: str):
        evaluate.group_block = block if mode != "before" else (lambda test, yhat: {})
        metrics.BOOTSTRAP_RESAMPLES = resamples if mode == "intervals" else 0
        try:
            evaluate.metrics_for(plugin, prepared.train, prepared.test, np.random.default_rng(0))
        finally:
            evaluate.group_block, metrics.BOOTSTRAP_RESAMPLES = block, resamples

    out = {mode: [] for mode in ("before", "groups", "intervals")}
    for _ in range(repeats // 10):  # interleaved, so that the machine's load falls on every mode alike
        for mode in out:
            out[mode].append(_median_ms(lambda m=mode: run(m), 10))
    with tempfile.TemporaryDirectory() as folder:
        saved = _median_ms(lambda: evaluate.save_predictions(evaluate.predictions(plugin, prepared.test),
                                                             Path(folder)), 10)
    return {mode: float(np.median(v)) for mode, v in out.items()} | {"fit": fit, "predictions": saved}


def main() -> None:
    print(f"{metrics.BOOTSTRAP_RESAMPLES} resamples; medians of {REPEATS} evaluations per mode, interleaved")
    for algo in ("pflr", "lr"):
        for sensitive in ("sex", "race"):
            m = measure(algo, sensitive)
            added = m["intervals"] - m["groups"]
            print(f"{algo}/adult data.sensitive={sensitive}: evaluate {m['before']:.2f} ms before, "
                  f"{m['groups']:.2f} ms with the group rates, {m['intervals']:.2f} ms with the intervals: the "
                  f"intervals add {added:.2f} ms = {added / m['groups']:.1f} x the evaluation without them "
                  f"or {added / (m['groups'] + m['predictions']):.0%} of it with the saved predictions "
                  f"({m['predictions']:.1f} ms); {added / (m['fit'] + m['groups']):.1%} of fit + evaluate (fit "
                  f"{m['fit']:.0f} ms)")


if __name__ == "__main__":
    main()
