"""The views derived on demand (datasets/views.py): the enumerable view from the card's keys alone (no row read,
within the cell budget, its options and one-line refusals), the causal view for non-private algorithms only (a DAG
with the sensitive node an ancestor of the outcome, learned on the training rows and said so), a card that declares
what the algorithm needs keeps its own view, and the five benchmark tables run every algorithm a table serves."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from omegaconf import OmegaConf, open_dict

from privfair_cli import compose, registry, runner, schema
from privfair_cli.algorithms import causal_effects as ce
from privfair_cli.config import load_card
from privfair_cli.datasets import discrete_spec, views
from privfair_cli.errors import ConfigError
from tests.test_compat import CARDS, PLUGINS, XFAIL, predicted_refusal
from tests.test_user_card import TABLE_KINDS, bare_credit_card, write_credit_csv

BENCHMARKS = ("adult", "compas", "german", "bank", "dutch")


def test_the_benchmark_tables_run_every_algorithm_a_table_serves():
    """Done-when of issue 44: on each of the five tables every classifier, generator, graph learner,
    semi-supervised learner and attack runs with its defaults (test_compat runs each pair; none is an xfail)."""
    refused = {(a, d): predicted_refusal(a, d) for d in BENCHMARKS for a in PLUGINS
               if PLUGINS[a].kind in TABLE_KINDS}
    assert not {pair: m for pair, m in refused.items() if m}
    assert not [pair for pair in XFAIL if pair[1] in BENCHMARKS]


def test_the_enumerable_view_reads_the_card_alone(monkeypatch):
    monkeypatch.setattr("privfair_cli.datasets.load", lambda *a, **k: pytest.fail("data was touched"))
    card = load_card("adult")
    view = views.enumerable_view(card)
    assert view.cells <= registry.ENUMERABLE_CELLS and {"sex", "income"} <= set(view.spec)
    assert view.cells == int(np.prod([len(h["bins"]) - 1 if "bins" in h else len(h.get("levels") or [0, 0])
                                      for h in view.spec.values()]))
    age = view.spec["age"]["bins"]  # equal-width bins of the declared range, not the rows' own
    assert age[0] == discrete_spec(card)["age"]["bins"][0] and age[-1] == discrete_spec(card)["age"]["bins"][-1]
    assert "enumerable" in schema.card_views(card) and "enumerable" not in schema.declared_views(card)


def test_undeclared_levels_are_dropped_and_named():
    card = load_card("adult")
    card.pop("levels")
    view = views.enumerable_view(card)
    assert "workclass" in view.undeclared and "workclass" not in view.spec
    assert "data.levels" in view.note("adult")


def test_the_view_options(monkeypatch):
    card = load_card("adult")
    card["views"] = {"enumerable": {"bins": 3, "keep": ["age", "education-num", "race"], "cells": "auto"}}
    view = views.enumerable_view(card)
    assert list(view.spec) == ["age", "education-num", "race", "sex", "income"] and view.bins == 3
    card["views"]["enumerable"] = {"cells": 4}
    with pytest.raises(ConfigError, match="data.views.enumerable.cells=4"):
        views.enumerable_card(card)
    card["views"]["enumerable"] = {"keep": ["nope"]}
    with pytest.raises(ConfigError, match=r"data.views.enumerable.keep names \['nope'\]"):
        views.enumerable_view(card)


@pytest.mark.parametrize("override,message", [
    ("data.views.enumerable.bins=1", "data.views.enumerable.bins=1 must be auto or an integer >= 2"),
    ("data.views.causal.tau=2", r"data.views.causal.tau=2 must be in \(0, 1\)"),
    ("data.views.causal.max_order=-1", "data.views.causal.max_order=-1 must be null or an integer >= 0"),
    ("+data.views.shape.x=1", "data.views.shape is not a derived view's options"),
    ("data.levels.race=3", "data.levels="),
])
def test_bad_view_options_are_refused_in_one_line(override, message):
    with pytest.raises(ConfigError, match=message) as err:
        schema.validate(compose.compose(["algo=ffpdg", "data=adult", override]))
    assert "\n" not in str(err.value)


def test_a_card_that_declares_the_view_keeps_it():
    """The paper recipes keep their own views (FFPDG's small domains, CFGAN's binarised Adult and its graph)."""
    for name in ("compas", "adult/xu2023_ffpdg", "compas/xu2023_ffpdg"):
        rc = schema.validate(compose.compose(["algo=ffpdg", f"data={name}"]))
        assert rc.data.raw == CARDS[name] and not rc.data.notes and not rc.data.derive
    rc = schema.validate(compose.compose(["algo=cfgan_te", "data=adult/xu2021_cfgan"]))
    assert rc.data.raw == CARDS["adult/xu2021_cfgan"] and not rc.data.derive
    rc = schema.validate(compose.compose(["algo=ffpdg", "data=adult"]))
    assert rc.data.raw["discrete"] != load_card("adult")["discrete"] and "enumerable view" in rc.data.notes[0]


def test_the_causal_view_is_for_non_private_algorithms_only():
    class Private(registry.Plugin):
        name, kind, private = "private_causal", "generator", True
        needs = ("causal_graph",)

    card = schema.validate_card(load_card("adult"))
    with pytest.raises(ConfigError, match="the causal view is learned from the rows"):
        schema.derive_views("private_causal", Private, {}, card)
    assert schema.derive_views("cfgan_te", PLUGINS["cfgan_te"], registry.defaults("cfgan_te"), card).derive == \
        ("causal_graph",)


def test_the_causal_view_learns_a_dag_on_the_training_rows(tmp_path, monkeypatch):
    write_credit_csv(tmp_path / "data" / "credit")
    monkeypatch.setenv("PRIVFAIR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path / "cache"))
    card = schema.derive_views("cf_a1", PLUGINS["cf_a1"], {}, schema.validate_card(bare_credit_card()))
    prepared = runner.prepare(card, 0, log=lambda *_: None)
    train, test = prepared.train, prepared.test
    spec = train.meta["causal_graph"]
    g = ce.CausalGraph.from_spec(spec, list(train.frame.columns))
    assert g.sensitive == "group" and g.outcome == "label" and "group" in g.ancestors("label")
    assert set(np.unique(train.frame.to_numpy())) <= {0, 1} and list(test.frame.columns) == list(train.frame.columns)
    assert np.array_equal(train.s, train.frame["group"]) and np.array_equal(test.y, test.frame["label"])
    assert len(train) + len(test) == 400 and "learned, not given" in prepared.notes[-1]


def test_a_derived_view_is_said_in_the_result(tmp_path, monkeypatch):
    write_credit_csv(tmp_path / "data" / "credit")
    monkeypatch.setenv("PRIVFAIR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path / "cache"))
    cfg = copy.deepcopy(compose.compose(["algo=real_data"]))
    with open_dict(cfg):
        cfg.data = OmegaConf.create(bare_credit_card())
    record = runner.run(cfg, tmp_path / "run", log=lambda *_: None)
    assert record["guarantee"] == "none" and any("learned, not given" in w for w in record["warnings"])


def test_the_onehot_view_leaves_out_only_what_is_too_wide(monkeypatch):
    """KDD's instance weight (123,232 levels) is left out for the FairGAN family, the widest first; a view that
    fits is left as it is; a private algorithm is never given the view (it counts levels on the rows)."""
    import pandas as pd

    from privfair_cli.datasets import Table

    monkeypatch.setattr(registry, "ONEHOT_WIDTH", 100)
    frame = pd.DataFrame({"wide": np.arange(6), "mid": [0, 1, 2, 0, 1, 2], "s": [0, 1] * 3, "y": [1, 0] * 3})
    t = Table("toy", np.zeros((6, 0)), frame["y"].to_numpy(), frame["s"].to_numpy(), [], frame,
              {"wide": 500, "mid": 3, "s": 2, "y": 2}, {"admissible": ["wide", "mid"]}, {})
    card = {"name": "toy", "sensitive": "s", "label": "y"}
    train, test, note = views.onehot_view(t, t, card)
    assert list(train.frame.columns) == ["mid", "s", "y"] and "wide" not in train.domain and test is train
    assert train.roles == {"admissible": ["mid"]} and "wide (500 levels)" in note
    assert views.onehot_view(train, train, card) == (train, train, None)

    class Private(registry.Plugin):
        name, kind, private = "private_wide", "generator", True
        needs = ("onehot",)

    kdd = schema.validate_card(load_card("kdd"))
    assert "onehot" not in schema.declared_views(kdd.raw) and "onehot" in schema.card_views(kdd.raw)
    with pytest.raises(ConfigError, match="counts levels on the rows"):
        schema.derive_views("private_wide", Private, {}, kdd)
    assert schema.derive_views("fairgan", PLUGINS["fairgan"], registry.defaults("fairgan"), kdd).derive == \
        ("onehot",)
