"""Run identity (privfair_cli.runid): a key added to a config later does not rename the runs stored before it."""

from omegaconf import OmegaConf

from privfair_cli import runid


def _cfg(**algo):
    return OmegaConf.create({"algo": {"name": "dpsgd", "sigma": "auto", **algo}, "data": {"name": "mnist"},
                             "eps": 7, "seed": 1, "overwrite": False, "device": "cpu"})


def test_an_added_key_at_its_neutral_value_leaves_the_identity_of_runs_stored_before_it():
    before = _cfg()  # a run stored before algo.momentum existed
    assert runid.short_id(_cfg(momentum=0)) == runid.short_id(before)
    assert runid.short_id(_cfg(momentum=0.0)) == runid.short_id(before)
    assert runid.differences(runid.identity(before), runid.identity(_cfg(momentum=0))) == []


def test_an_added_key_at_any_other_value_is_another_run():
    assert runid.short_id(_cfg(momentum=0.5)) != runid.short_id(_cfg(momentum=0))
    assert runid.differences(runid.identity(_cfg()), runid.identity(_cfg(momentum=0.5))) == [
        "algo.momentum: <absent> -> 0.5"]
    assert runid.short_id(_cfg(momentum=False)) != runid.short_id(_cfg())  # a bool is not the number 0


def test_the_neutral_rule_needs_the_whole_path():
    # a top-level or differently nested `momentum` is an ordinary key
    a = OmegaConf.create({"algo": {"name": "x"}, "momentum": 0})
    b = OmegaConf.create({"algo": {"name": "x"}})
    assert runid.short_id(a) != runid.short_id(b)


def test_options_added_to_every_card_at_their_defaults_leave_the_identity_as_before_them():
    before = OmegaConf.create({"algo": {"name": "lr"}, "data": {"name": "compas", "n": None}, "eps": 1, "seed": 0})
    views = {"enumerable": {"cells": "auto", "bins": "auto", "keep": None},
             "causal": {"tau": 0.01, "max_nodes": None, "max_order": None}}
    after = OmegaConf.merge(before, {"data": {"views": views}})
    assert runid.identity(after) == runid.identity(before)  # the emptied `views` block goes too
    assert runid.short_id(after) == runid.short_id(before)
    other = OmegaConf.merge(after, {"data": {"views": {"causal": {"max_nodes": 12}}}})
    assert runid.differences(runid.identity(before), runid.identity(other)) == ["data.views: <absent> -> "
                                                                               "{'causal': {'max_nodes': 12.0}}"]
