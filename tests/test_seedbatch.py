"""Seeds trained together (privfair_cli/seedbatch.py): per-member generators (algorithms/gan.py `Ensemble`), a
CFGAN ensemble's members against the solo models of their seeds, and the sweep's seed groups (sweep.tasks_of)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from privfair_cli import registry, seedbatch
from privfair_cli.algorithms import causal_effects as ce
from privfair_cli.algorithms import gan
from privfair_cli.algorithms.cfgan import CFGANModel
from privfair_cli.threads import torch_threads
from privfair_cli.tools import sweep
from tests.conftest import card, needs_data

SMOKE = ["algo=cfgan_te", "data=adult_cfgan", "algo.profile=smoke"]


def test_a_member_seeded_alone_draws_what_its_solo_ensemble_draws():
    both, solo = gan.Ensemble(2, "cpu", [7, 9]), [gan.Ensemble(1, "cpu", s) for s in (7, 9)]
    for draw in (lambda e: e.rand(3, 4), lambda e: e.randn(5), lambda e: e.randint(10, 6)):
        batched = draw(both)
        for k, e in enumerate(solo):
            assert torch.equal(batched[k:k + 1], draw(e))
    grouped = gan.Ensemble(6, "cpu", [7, 9])  # 3 members per seed (CFGAN's node networks)
    assert torch.equal(grouped.rand(2)[3:], gan.Ensemble(3, "cpu", 9).rand(2))
    assert torch.equal(gan.Ensemble(2, "cpu", 7).rand(4), torch.rand(2, 4, generator=torch.Generator().manual_seed(7)))
    with pytest.raises(ValueError, match="cannot seed 5 members"):
        gan.Ensemble(5, "cpu", [1, 2])


def test_cfgan_members_train_as_their_solo_models():
    """Same draws, same arithmetic up to the order of some float sums: after 60 steps every parameter of each member
    is within 1e-5 of its solo model's and the samples it generates are the solo model's."""
    g = ce.CausalGraph.from_spec(card("adult_cfgan")["causal_graph"])
    V = (np.random.default_rng(0).random((1500, len(g.nodes))) < 0.4).astype(np.int64)
    cfg = dataclasses.replace(registry.make("cfgan_te").cfg, warmup_epochs=2, fair_epochs=3, batch_size=128)
    with torch_threads(1):
        both = CFGANModel(g, cfg, 2, "cpu", [11, 22]).fit(V, progress=False)
        for k, seed in enumerate((11, 22)):
            solo = CFGANModel(g, cfg, 1, "cpu", seed).fit(V, progress=False)
            for a, b in zip(solo.g_params + solo.d_params, both.g_params + both.d_params, strict=True):
                n = a.shape[0]
                assert torch.allclose(a, b[k * n:(k + 1) * n], atol=1e-5)
            assert np.array_equal(solo.generate(3000, 5)[0], both.generate(3000, 5)[k])
            assert solo.g2_effect()[0] == pytest.approx(both.g2_effect()[k], abs=1e-3)


def test_train_keeps_the_group_and_lets_other_data_train_alone():
    calls = []

    def fit(seeds):
        calls.append(list(seeds))
        time.sleep(0.03)
        return f"model{len(calls)}"

    with seedbatch.group([0, 1, 2]):
        first = seedbatch.train("k", 10, [10, 11, 12], fit)
        assert first[:3] == ("model1", 0, [10, 11, 12])
        kept = seedbatch.train("k", 12, [10, 11, 12], fit)
        assert kept[:3] == ("model1", 2, [10, 11, 12])
        # each run reports a third of the group's training: the first subtracts two thirds, the others add a third
        assert kept[3] > 0.01 and first[3] == pytest.approx(-2 * kept[3])
        alone = seedbatch.train("other data", 11, [10, 11, 12], fit)
        assert alone[:3] == ("model2", 0, [11]) and alone[3] == 0
    assert seedbatch.GROUP == [] and seedbatch.train("k", 10, [10], fit)[0] == "model3"
    assert calls == [[10, 11, 12], [11], [10]]


@needs_data("adult")
def test_sweep_groups_a_seed_batching_plugin_on_seed_independent_data(tmp_path):
    one = lambda *extra: [*SMOKE, *extra]  # noqa: E731
    jobs = [one("seed=0"), ["algo=real_data", "data=adult_cfgan", "seed=0"], one("seed=1"), one("seed=2"),
            ["algo=cfgan_te", "data=synth_causal", "algo.profile=smoke", "seed=0"],
            ["algo=cfgan_te", "data=synth_causal", "algo.profile=smoke", "seed=1"]]
    tasks = sweep.tasks_of(jobs, tmp_path)
    assert tasks == [[jobs[0], jobs[2], jobs[3]], [jobs[1]], [jobs[4]], [jobs[5]]]  # generated data: alone


@needs_data("adult")
def test_batched_sweep_records_its_group_and_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines = []
    outcome = sweep.run_inprocess([*SMOKE, "seed=0,1"], tmp_path / "sw", log=lines.append)
    assert (outcome.total, outcome.failed) == (2, [])
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "sw").rglob("metrics.json"))]
    assert [r["seed"] for r in records] == [0, 1]
    assert all(r["env"]["seeds_batched"] == [0, 1] for r in records)
    assert records[1]["timings"]["fit"] < records[0]["timings"]["fit"] / 5  # the second took its member
    assert records[0]["metrics"]["chi2"] != records[1]["metrics"]["chi2"]  # two members, not one model twice
    (Path(next((tmp_path / "sw").rglob("seed=1-*"))) / "metrics.json").unlink()
    again = sweep.run_inprocess([*SMOKE, "seed=0,1"], tmp_path / "sw", log=lines.append)
    assert again.skipped == 1 and sweep.tasks_of([[*SMOKE, "seed=0"]], tmp_path / "sw") == [[[*SMOKE, "seed=0"]]]
    redone = json.loads(next((tmp_path / "sw").rglob("seed=1-*/metrics.json")).read_text())
    assert "seeds_batched" not in redone["env"]  # the one incomplete seed trained alone
