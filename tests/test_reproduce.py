"""The published-number comparison: cell matching, the tolerance rule, verdicts; CPU fallbacks."""

import math

import pandas as pd
import pytest

from privfair_cli import reproduce

PUBLISHED = pd.DataFrame([
    ["s", "T", "Adult", "lr", "eps=inf;runs=10", "accuracy", 0.80, 0.01, ""],
    ["s", "T", "Adult", "privlr", "eps=1;runs=10", "accuracy", 0.70, 0.05, ""],
    ["s", "T", "Adult", "privlr", "eps=10;runs=10", "accuracy", 0.75, 0.02, ""],
    ["s", "T", "US", "privlr", "eps=1;runs=10", "accuracy", 0.70, 0.05, ""],
    ["s", "Other", "Adult", "lr", "eps=inf;runs=10", "accuracy", 0.1, 0.0, ""],
], columns=["source", "table", "dataset", "algorithm", "setting", "metric", "mean", "std", "notes"])

SPEC = {"table": "T", "datasets": {"Adult": "adult", "US": "adult"}, "metrics": {"accuracy": "accuracy"},
        "algorithms": {"lr": "lr", "privlr": "privlr"}, "settings": {"eps": "eps"},
        "floors": {"accuracy": 0.01}, "substitute": ["US"], "reasons": {"privlr|Adult|*": "known reason"}}


def runs(algo, eps, accs):
    return pd.DataFrame({"algo": algo, "data": "adult", "eps": eps, "seed": range(len(accs)), "accuracy": accs,
                         "cfg.eps": eps})


def test_compare_matches_cells_and_applies_the_tolerance_rule():
    df = pd.concat([runs("lr", 1.0, [0.801, 0.803, 0.805, 0.807]), runs("privlr", 1, [0.5, 0.52, 0.48, 0.5])])
    out = reproduce.compare(df, PUBLISHED, SPEC).set_index(["dataset", "algorithm", "setting"])
    lr = out.loc[("Adult", "lr", "eps=inf;runs=10")]
    ours_std = pd.Series([0.801, 0.803, 0.805, 0.807]).std()
    assert lr.ours_mean == pytest.approx(0.804)
    assert lr.tolerance == pytest.approx(max(0.01, 2 * math.sqrt(0.01**2 + ours_std**2) / 2))
    assert lr.verdict == "match" and lr.reason == ""
    bad = out.loc[("Adult", "privlr", "eps=1;runs=10")]
    assert bad.verdict == "deviates" and bad.deviation == pytest.approx(-0.2) and bad.reason == "known reason"
    assert out.loc[("Adult", "privlr", "eps=10;runs=10")].verdict == "not_run"  # no eps=10 runs
    assert out.loc[("US", "privlr", "eps=1;runs=10")].verdict == "substitute"
    assert len(out) == 4  # the other table is not compared


def test_without_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert reproduce.without_cuda({"without_cuda": "skip"}, []) is None
    rule = {"without_cuda": ["data=adult,dutch", "seed=range(5)"]}
    assert reproduce.without_cuda(rule, ["seed=range(2)"]) == ["data=adult,dutch", "seed=range(2)"]
    assert reproduce.without_cuda({}, ["x=1"]) == ["x=1"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert reproduce.without_cuda({"without_cuda": "skip"}, ["x=1"]) == ["x=1"]


def test_parse_setting():
    assert reproduce.parse_setting("eps=1;eps_f=0.5;runs=10") == {"eps": "1", "eps_f": "0.5", "runs": "10"}
