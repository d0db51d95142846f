"""Results folder: atomic writes, completeness for resume, aggregation; registry and RNG streams."""

import json

import numpy as np
import pandas as pd
import pytest

from privfair_cli import registry, results, runner
from privfair_cli.errors import ConfigError


def record(seed, acc):
    return {"algo": "lr", "data": "toy", "eps": 1.0, "delta": 0.0, "seed": seed,
            "metrics": {"accuracy": acc, "risk_difference": float("nan")},
            "privacy": {"eps_spent": 0.0, "delta_spent": 0.0, "ledger": []}, "guarantee": "none", "warnings": [],
            "timings": {"total": 0.1},
            "env": {"device": "cpu"}}


def test_write_run_and_collect(tmp_path):
    for seed, acc in enumerate([0.8, 0.9]):
        results.write_run(tmp_path / f"seed={seed}", "algo: lr\n", record(seed, acc))
    rec = json.loads((tmp_path / "seed=0" / "metrics.json").read_text())
    assert rec["metrics"]["risk_difference"] is None  # NaN is written as null, valid JSON
    df = results.collect(tmp_path)
    assert len(df) == 2
    summary = results.summarise(df, ["accuracy"])
    assert summary.loc[0, "runs"] == 2
    assert summary.loc[0, "accuracy_mean"] == pytest.approx(0.85)
    assert summary.loc[0, "accuracy_std"] == pytest.approx(np.std([0.8, 0.9], ddof=1))


def test_interrupted_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(results.os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        results.atomic_write(target, '{"half": ')
    assert not target.exists()
    assert not results.is_complete(tmp_path)


def test_incomplete_metrics_is_not_complete(tmp_path):
    (tmp_path / "metrics.json").write_text('{"algo": "lr", "metr')
    assert not results.is_complete(tmp_path)
    (tmp_path / "metrics.json").write_text(json.dumps({"algo": "lr"}))
    assert not results.is_complete(tmp_path)


def test_summarise_groups_by_swept_keys():
    df = pd.DataFrame({"algo": ["a"] * 4, "data": ["d"] * 4, "eps": [1.0] * 4, "delta": [0.0] * 4,
                       "seed": [0, 1, 0, 1], "eps_f_ratio": ["0.1", "0.1", "0.5", "0.5"],
                       "accuracy": [0.1, 0.3, 0.5, 0.7], "run_dir": list("wxyz")})
    s = results.summarise(df, ["accuracy"])
    assert list(s["accuracy_mean"]) == pytest.approx([0.2, 0.6])


def test_registry_unknown_and_duplicate():
    with pytest.raises(ConfigError, match="allowed"):
        registry.get("no_such_algorithm")
    lr = registry.get("lr")

    class Clash(registry.Plugin):
        name = "lr"
        kind = "classifier"

    with pytest.raises(ValueError, match="twice"):
        registry.register(Clash)
    assert registry.get("lr") is lr


def test_streams_are_independent_and_reproducible():
    a, b = runner.streams(0), runner.streams(0)
    assert a["data"].random() == b["data"].random()
    draws = {name: g.random() for name, g in runner.streams(1).items()}
    assert len(set(draws.values())) == len(draws)
