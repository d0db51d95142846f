"""Functional-mechanism LR family: wall time of Xu Tables 8.1 + 8.2 (all methods, Adult and Dutch, 10 runs,
in-process through the runner's pieces: cached load, split, fit through a ledger, evaluate) and pflr_star fits
per second on Adult. The baseline is the floor the issue names: one X^T X plus one d x d eigendecomposition."""

from __future__ import annotations

import time

import numpy as np
import yaml
from threadpoolctl import threadpool_limits

from privfair_cli import datasets as data_lib
from privfair_cli import evaluate, registry
from privfair_cli.main import config_dir
from privfair_cli.privacy import Budget, PrivacyLedger
from privfair_cli.runner import streams

TABLE_8_1 = [(a, 1.0) for a in ("lr", "lr_taylor", "privlr", "fairlr", "pflr", "pflr_star")]
TABLE_8_2 = [(a, e) for a in ("privlr", "pflr", "pflr_star") for e in (0.1, 1.0, 10.0, 100.0)]


def _yaml(group: str, name: str) -> dict:
    with open(config_dir() / group / f"{name}.yaml") as f:
        return yaml.safe_load(f)


def one_run(algo: str, card: dict, eps: float, seed: int) -> dict:
    rng = streams(seed)
    train, test = data_lib.split(data_lib.load(card, rng["data"]), card.get("test_size", 0.2), rng["split"])
    plugin = registry.make(algo)
    ledger = PrivacyLedger(Budget(eps), type(plugin).accountant)
    plugin.fit(train, Budget(eps), ledger, rng["noise"])
    ledger.check()
    return evaluate.classifier(plugin, train, test, rng["eval"])


def floor_seconds(X: np.ndarray, repeat: int = 20) -> float:
    with threadpool_limits(1):
        t = time.perf_counter()
        for _ in range(repeat):
            np.linalg.eigh(X.T @ X)
        return (time.perf_counter() - t) / repeat


def main() -> None:
    cards = {name: _yaml("data", name) for name in ("adult", "dutch")}
    for card in cards.values():
        data_lib.load(card)  # parse once into the cache, as a first `privfair run` would
    t0 = time.perf_counter()
    n = 0
    for cells in (TABLE_8_1, TABLE_8_2):
        for algo, eps in cells:
            for card in cards.values():
                for seed in range(10):
                    one_run(algo, card, eps, seed)
                    n += 1
    total = time.perf_counter() - t0
    print(f"Tables 8.1 + 8.2: {n} runs (load + split + fit + evaluate) in {total:.1f} s "
          f"({1000 * total / n:.1f} ms per run; target < 60 s)")

    rng = streams(0)
    train, _ = data_lib.split(data_lib.load(cards["adult"]), 0.2, rng["split"])
    reps, t = 50, time.perf_counter()
    for i in range(reps):
        registry.make("pflr_star").fit(train, Budget(1.0), PrivacyLedger(Budget(1.0)), np.random.default_rng(i))
    per_fit = (time.perf_counter() - t) / reps
    floor = floor_seconds(train.X)
    print(f"pflr_star on Adult (n = {len(train)}, d = {train.d}): {1 / per_fit:.1f} fits/s "
          f"({1000 * per_fit:.1f} ms per fit = {per_fit / floor:.2f} x one X^T X + eigh at {1000 * floor:.1f} ms)")
