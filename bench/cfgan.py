"""cfgan family: CFGAN training steps on the 11-node Adult graph (spec cfgan.md §9), CPU, one torch thread.

1. One training step (one D step + one G step on the same generated batch) at batch 256, 1 seed, for CausalGAN
   (G1 only), CFGAN (TE) and (SE) (3 channels: G1, reference, intervention) and CFGAN (CE) (2048 noise vectors for
   the J2 term); the spec estimates 10-20 ms per step. The baseline in the same process: the per-node networks
   evaluated node by node (a loop over the 11 nodes) instead of one grouped matmul per topological level (both
   feature-major: a level's activations are (E * k, width, rows), each layer one batched W^T x).
2. Seeds batched: 5 seeds as one ensemble (stacked parameters) against 1 seed, per step.
3. One full run of each model at the spec's schedule (50 warm-up + 100 fair epochs at batch 256 on 65,123 rows),
   extrapolated from the measured steps, and both tables with 5 seeds (CausalGAN, TE, SE, CE; issue target: under
   1 hour on the 2-core machine); `CFGAN_BENCH_FULL=1` also times a real `fast` fit of CFGAN (TE).
Synthetic binary data on the Adult graph (the card's `causal_graph` block), so no dataset file is needed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import numpy as np
import torch

from privfair_cli import registry
from privfair_cli.algorithms import causal_effects as ce
from privfair_cli.algorithms.cfgan import CFGANModel
from privfair_cli.config import load_card

ROWS = 65_123
NAMES = {"causalgan": "causalgan", "te": "cfgan_te", "se": "cfgan_se", "ce": "cfgan_ce"}
CPU: dict[str, float] = {}


def data(g, n: int = ROWS, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random((n, len(g.nodes))) < 0.4).astype(np.int64)


def per_step(models, lam: float, reps: int, warm: int = 3, B: int = 256, rounds: int = 3) -> float:
    """Wall seconds per step (best of `rounds`; the best round's CPU seconds in CPU["last"])."""
    for _ in range(warm):
        for m in models:
            m.step(B, lam)
    best_wall, best_cpu = float("inf"), float("inf")
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(reps):
            for m in models:
                m.step(B, lam)
        best_cpu = min(best_cpu, (time.process_time() - c0) / reps)
        best_wall = min(best_wall, (time.perf_counter() - t0) / reps)
    CPU["last"] = best_cpu
    return best_wall


def model(g, V, name: str, E: int = 1, seed: int = 0) -> CFGANModel:
    m = CFGANModel(g, registry.make(NAMES[name]).cfg, E, "cpu", seed)
    m.V = torch.tensor(V, dtype=torch.float32)
    return m


def step_flops(m: CFGANModel, lam: float, B: int = 256) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        m.step(B, lam)
    return counter.get_total_flops()


class NodeLoop(CFGANModel):
    """Baseline: the same networks evaluated one node at a time (one batched matmul per node and layer)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self._set_levels([[i] for i in range(self.N)])


def main() -> None:
    torch.set_num_threads(1)
    g = ce.CausalGraph.from_spec(load_card("adult_cfgan")["causal_graph"])
    V = data(g)
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (figures measured loaded are "
          f"inflated by other jobs; CPU times are the better guide)")
    from bench.fairgan import gemm_rate

    rate = gemm_rate()
    print(f"GEMM rate, (100 x 256) @ (256 x 128), one thread: {rate / 1e9:.0f} GFLOP/s")
    one, five, floor = {}, {}, {}
    for name in NAMES:
        lam = 0.0 if name == "causalgan" else 1.0
        reps = 10 if name == "ce" else 30
        m1 = model(g, V, name)
        wall = per_step([m1], lam, reps)
        one[name] = CPU["last"]
        floor[name] = step_flops(m1, lam) / rate
        wall5 = per_step([model(g, V, name, 5)], lam, max(3, reps // 3))
        five[name] = CPU["last"]
        print(f"{NAMES[name]}: one step at batch 256, 1 seed: {wall * 1e3:.1f} ms wall, {one[name] * 1e3:.1f} ms CPU "
              f"= {one[name] / floor[name]:.1f}x its matmul-FLOP floor {floor[name] * 1e3:.2f} ms (goal <= 1.5x; spec "
              f"estimate 10-20 ms); 5 seeds batched: {five[name] * 1e3:.1f} ms CPU = "
              f"{five[name] / one[name]:.2f}x one seed ({wall5 * 1e3:.1f} ms wall)")
    loop = NodeLoop(g, registry.make("cfgan_te").cfg, 1, "cpu", 0)
    loop.V = torch.tensor(V, dtype=torch.float32)
    per_step([loop], 1.0, 30)
    print(f"baseline, cfgan_te with the 11 node networks evaluated one by one: {CPU['last'] * 1e3:.1f} ms CPU per "
          f"step = {CPU['last'] / one['te']:.2f}x the grouped-per-level step")

    cfg = registry.make("cfgan_te").cfg
    per_epoch = math.ceil(ROWS / cfg.batch_size)
    warm, fair = cfg.warmup_epochs * per_epoch, cfg.fair_epochs * per_epoch

    def run_seconds(t: dict, name: str) -> float:
        if name == "causalgan":
            return t["causalgan"] * (warm + fair)
        return t["causalgan"] * warm + t[name] * fair

    lines = [f"{NAMES[n]} {run_seconds(one, n) / 60:.1f} min" for n in NAMES]
    print(f"one full run at the spec's schedule ({cfg.warmup_epochs} + {cfg.fair_epochs} epochs, {per_epoch} steps "
          f"per epoch), extrapolated from the CPU time per step: " + ", ".join(lines))
    both = sum(run_seconds(five, n) for n in NAMES)  # CausalGAN's run serves both tables (B14)
    solo = 5 * sum(run_seconds(one, n) for n in NAMES)
    print(f"both tables, 5 seeds batched per model (causalgan, te, se, ce; how `privfair reproduce` trains them, "
          f"privfair_cli.seedbatch), one core: {both / 3600:.2f} h; on the 2 cores (two models at a time): "
          f"~{both / 2 / 3600:.2f} h (issue target: under 1 h: ratio {both / 2 / 3600:.2f}); as 5 single-seed runs "
          f"per model (the baseline): {solo / 3600:.2f} h on one core, ~{solo / 2 / 3600:.2f} h on two")
    from privfair_cli.algorithms.cfgan import DEFAULT, DEFAULT_CE

    lines = []
    for n in NAMES:
        d = DEFAULT_CE if n == "ce" else DEFAULT
        t = (one["causalgan"] * d["warmup_epochs"] + one[n] * d["fair_epochs"]) * per_epoch
        lines.append(f"{NAMES[n]} {t / 60:.1f} min")
    print("one run at the default schedule (10 + 20 epochs; CE 5 + 10), extrapolated: " + ", ".join(lines))
    if os.environ.get("CFGAN_BENCH_FULL") == "1":
        t0 = time.perf_counter()
        fast = dataclasses.replace(cfg, profile="fast")
        CFGANModel(g, fast, 1, "cpu", 0).fit(V, progress=False)
        print(f"cfgan_te fast profile (5 + 10 epochs), timed fit: {(time.perf_counter() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
