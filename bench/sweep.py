"""Parallel sweeps: Xu Table 8.2 (PrivLR, PFLR, PFLR* x Adult, Dutch x 4 budgets x 10 seeds = 240 runs) as one
`privfair run -m` on the joblib launcher, with n_jobs=1 (the baseline, measured in the same benchmark) and with
n_jobs = 2 and the machine's cores. Each sweep starts from an empty sweep folder and a warm dataset cache;
wall time includes Hydra's composition of every job and the workers' start-up. The machine's own ceiling comes
first: the same pure-Python loop in one process vs split over the cores (a VM's cores may not scale linearly)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRID = ["experiment=xu2021_table8_2"]


def sweep_seconds(n_jobs: int, root: Path) -> float:
    cmd = [sys.executable, "-m", "privfair_cli", "run", "-m", *GRID, f"hydra.launcher.n_jobs={n_jobs}",
           "hydra/launcher=joblib", f"hydra.sweep.dir={root / f'jobs{n_jobs}'}"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ | {"PRIVFAIR_PROGRESS": "off"})
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"sweep with n_jobs={n_jobs} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    runs = len(list((root / f"jobs{n_jobs}").rglob("metrics.json")))
    assert runs == 240, f"expected 240 complete runs, found {runs}"
    return seconds


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def ceiling(cores: int, n: int = 10_000_000, repeat: int = 3) -> float:
    """Speed-up of `cores` worker processes over one on a CPU-bound loop, `cores` loops each time (best of
    `repeat`): what any parallel sweep can reach on this machine."""
    ctx = multiprocessing.get_context("spawn")
    best = {}
    for workers in (1, cores):
        with ctx.Pool(workers) as pool:
            pool.map(_spin, [1000] * workers)  # start the workers before timing
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                pool.map(_spin, [n] * cores, chunksize=1)
                times.append(time.perf_counter() - t)
            best[workers] = min(times)
    return best[1] / best[cores]


def main() -> None:
    cores = os.cpu_count() or 1
    print(f"machine ceiling: {ceiling(cores):.2f}x with {cores} processes on a CPU-bound loop")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run([sys.executable, "-m", "privfair_cli", "run", "algo=lr", "data=dutch",
                        f"hydra.run.dir={root / 'warm'}"], capture_output=True, check=True)  # fill the parse cache
        base = sweep_seconds(1, root)
        print(f"Table 8.2 grid, 240 runs, one multirun, n_jobs=1: {base:.1f} s ({240 / base:.1f} runs/s)")
        for n_jobs in sorted({2, cores}):
            t = sweep_seconds(n_jobs, root)
            print(f"n_jobs={n_jobs}: {t:.1f} s, speed-up {base / t:.2f}x over n_jobs=1 on {cores} cores "
                  f"(target >= 1.7x at n_jobs=2 on 2 cores)")


if __name__ == "__main__":
    main()
