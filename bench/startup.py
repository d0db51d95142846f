"""The CLI's own cost, issue rows "`privfair run` to a one-line error" and "re-running a complete 12-run sweep":
each command as a fresh process (medians of interleaved repetitions), against the floor of the same process doing
nothing but start Python and import Hydra and OmegaConf, measured in the same benchmark. The sweep (lr and pflr on
Adult, eps 1 and 10, seeds 0-2: 12 runs) is run once into a fixed `hydra.sweep.dir`, then timed when every run is
complete and skipped."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPEATS = 5
SWEEP = ["-m", "algo=lr,pflr", "data=adult", "eps=1,10", "seed=range(3)"]


def _seconds(cmd: list[str], cwd: Path, expect: int) -> float:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=os.environ | {"PRIVFAIR_PROGRESS": "off"})
    seconds = time.perf_counter() - t
    if proc.returncode != expect:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode} (expected {expect}):\n{proc.stderr[-2000:]}")
    return seconds


def main() -> None:
    cli = [sys.executable, "-m", "privfair_cli"]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        sweep = [*cli, "run", *SWEEP, f"hydra.sweep.dir={root / 'sweep'}"]
        first = _seconds(sweep, root, 0)
        rows = {
            "floor: python + import hydra, omegaconf": ([sys.executable, "-c", "import hydra, omegaconf"], 0),
            "one-line error: privfair run algo=lr eps=0": ([*cli, "run", "algo=lr", "eps=0"], 2),
            "listing: privfair list": ([*cli, "list"], 0),
            "the 12-run sweep again, all complete (skipped)": (sweep, 0),
        }
        times: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(REPEATS):  # interleaved, so that the machine's load falls on every row alike
            for name, (cmd, rc) in rows.items():
                times[name].append(_seconds(cmd, root, rc))
    med = {name: float(np.median(v)) for name, v in times.items()}
    floor = med["floor: python + import hydra, omegaconf"]
    print(f"medians of {REPEATS} fresh processes each, interleaved; the 12-run sweep itself took {first:.1f} s")
    for name, seconds in med.items():
        print(f"{name:<50} {seconds:6.2f} s  {seconds / floor:5.1f}x the floor")


if __name__ == "__main__":
    main()
