"""The tools built on the core of a run: sweeps (sweep, watch), aggregation and figures (report, plots), the
published-number comparisons (reproduce, regress), the generated docs (docs) and the privacy auditor (audit).
The core (compose, schema, registry, runner, results, privacy, metrics, evaluate) never imports them, and
algorithms and datasets import the core only (tests/test_layers.py)."""
