"""`make bench`: run every benchmark module in this folder (each defines `main()` and prints its figures).

Benchmarks report ratios against a baseline measured in the same process; they never fail a build on time.
Run some with `python -m bench NAME [NAME ...]`; a benchmark's own options go to its module
(`python -m bench.fes grid RUNS WORKERS`).
"""

import importlib
import pkgutil
import sys
from pathlib import Path


def main(names: list[str]) -> None:
    found = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if not m.name.startswith("_"))
    unknown = [n for n in names if n not in found]
    if unknown:
        sys.exit(f"error: no benchmark named {', '.join(unknown)}; allowed: {', '.join(found)} "
                 "(a benchmark's own options: python -m bench.NAME ...)")
    for name in names or found:
        print(f"\n=== bench {name} ===", flush=True)
        importlib.import_module(f"bench.{name}").main()


if __name__ == "__main__":
    main(sys.argv[1:])
