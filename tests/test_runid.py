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
