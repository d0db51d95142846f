"""One card per dataset, a paper's preprocessing a named recipe of it (issue 44): `data=<dataset>
data.recipe=<recipe>` (Hydra option `data=<dataset>/<recipe>`), the old card names as aliases
(config.DATA_ALIASES), and the published comparisons unmoved: every recipe composes to the data config the card
it replaced composed to, under that card's name, with the same run id."""

from __future__ import annotations

import hashlib
import json

import pytest
from omegaconf import OmegaConf

from privfair_cli import compose, runid
from privfair_cli import datasets as data_lib
from privfair_cli.config import (
    DATA_ALIASES,
    canonical_overrides,
    config_dir,
    data_choice,
    data_options,
    group_options,
    load_card,
    load_node,
    recipes,
)
from privfair_cli.errors import ConfigError

# Digest of each recipe's data identity (runid.identity, the part that names its runs' folders), leaving out the
# keys at their data_defaults value (an option added there for every card is runid.ADDED's business). Taken from
# the cards these recipes replaced, composed before the move: a change here moves a published comparison's data
# (and renames its stored runs), so it is deliberate or a bug.
PINNED = {
    "adult_3k": "3e5ca33db1d9fd52",
    "adult_balanced": "50fb90f1019f5616",
    "adult_cfgan": "d8d6f2d7e25eedca",
    "adult_fairgan": "d171227f8c4a6cf1",
    "adult_ffpdg": "34444fee034f9ae7",
    "adult_pc": "b651746f44bab750",
    "adult_race": "ce46776af4205743",
    "adult_ssl": "c1cbe822d26400ae",
    "bank_es": "d8f0505e8175c896",
    "bank_fair_ssl": "c4ab28a5f96d8b14",
    "bank_ssl": "4fb9202a37874333",
    "compas_ffpdg": "fcc6b0415feaa555",
    "dutch_unbalanced": "383f45dae87f5de7",
    "german_age": "1f51f848453898d2",
    "health_es": "b75521dae6b53859",
    "health_fair_ssl": "08c4aa57cc6d69f0",
    "health_ssl": "3c46eb4edd8ceb13",
    "mnist_unbalanced": "f88fbc8ecc6272d8",
    "synth_fes_da2": "a12c39be1ca190a3",
    "titanic_crfs": "24aafd24b24c20f4",
    "titanic_fair_ssl": "b4c7a50655ac488f",
}


def _data(cfg) -> dict:
    return OmegaConf.to_container(cfg.data, resolve=True)


def _digest(cfg) -> str:
    defaults = OmegaConf.to_container(OmegaConf.load(config_dir() / "data_defaults" / "default.yaml"))
    data = runid.identity(cfg)["data"]
    data = {k: v for k, v in data.items() if k not in defaults or runid._canonical(defaults[k]) != v}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize("old", sorted(DATA_ALIASES))
def test_an_old_card_name_is_its_recipe_in_every_form(old):
    dataset, recipe = DATA_ALIASES[old].split("/")
    forms = [[f"data={old}"], [f"data={dataset}", f"data.recipe={recipe}"], [f"data={dataset}/{recipe}"]]
    cfgs = [compose.compose(form) for form in forms]
    data = _data(cfgs[0])
    assert all(_data(cfg) == data for cfg in cfgs[1:])
    assert load_card(old) == load_card(dataset, recipe=recipe) == load_card(f"{dataset}/{recipe}") == data
    assert (data["name"], data["recipe"]) == (old, recipe)  # runs keep the old card's folder name
    assert len({runid.short_id(cfg) for cfg in cfgs}) == 1
    assert _digest(cfgs[0]) == PINNED[old], f"the data of {old} (data={dataset} data.recipe={recipe}) changed"


def test_the_recipe_name_is_no_part_of_the_run_id():
    cfg = compose.compose(["data=adult", "data.recipe=xu2023_ffpdg", "algo=ffpdg"])
    bare = OmegaConf.to_container(cfg, resolve=True)
    del bare["data"]["recipe"]  # as a run stored before recipes existed (card adult_ffpdg) holds it
    assert runid.short_id(cfg) == runid.short_id(OmegaConf.create(bare))
    assert runid.differences(runid.identity(bare), runid.identity(cfg)) == []


def test_datasets_and_recipes_are_listed_apart_from_the_old_names():
    datasets = group_options("data")
    assert not set(DATA_ALIASES) & set(datasets)  # an old name is not a card of its own
    assert "health" in datasets and recipes("adult") == sorted(
        r.split("/")[1] for r in DATA_ALIASES.values() if r.startswith("adult/"))
    options = data_options()
    assert set(DATA_ALIASES.values()) <= set(options) and set(datasets) <= set(options)
    for option in options:  # a recipe names itself, and composes from its card's files
        if "/" in option:
            dataset, recipe = option.split("/")
            node = OmegaConf.to_container(load_node("data", option), resolve=True)
            assert node["recipe"] == recipe
            assert node.get("subdir") == load_card(dataset).get("subdir")


def test_sweeps_pair_each_dataset_with_the_recipe():
    assert canonical_overrides(["-m", "data=adult,compas", "data.recipe=xu2023_ffpdg", "eps=1"]) == [
        "-m", "data=adult/xu2023_ffpdg,compas/xu2023_ffpdg", "eps=1"]
    assert canonical_overrides(["data=adult_3k,breast_cancer_wdbc"]) == ["data=adult/zhang2022_crfs,breast_cancer_wdbc"]
    assert canonical_overrides(["data=adult", "data.recipe=null,xu2021_balanced"]) == [
        "data=adult,adult/xu2021_balanced"]
    assert canonical_overrides(["data.recipe=xu2021_cfgan"]) == ["data=adult/xu2021_cfgan"]  # the default dataset
    jobs = compose.expand(["experiment=xu2023_table3", "seed=0"])  # the experiment sweeps the recipe form
    assert sorted({line for job in jobs for line in job if line.startswith("data=")}) == [
        "data=adult/xu2023_ffpdg", "data=compas/xu2023_ffpdg"]
    cfg = compose.job_config(["algo=ffpdg", "data=compas_ffpdg", "seed=0"])
    assert (cfg.data.name, cfg.data.recipe) == ("compas_ffpdg", "xu2023_ffpdg")


@pytest.mark.parametrize("overrides, message", [
    (["data=adult", "data.recipe=ffpdg"], "data.recipe='ffpdg' is unknown for data=adult; allowed: ding2020_race"),
    (["data=dutch", "data.recipe=xu2021_balanced"], "data.recipe='xu2021_balanced' is unknown for data=dutch; "
                                                    "allowed: xu2021_unbalanced"),
    (["data=law_school", "data.recipe=xu2021_balanced"], "data.recipe='xu2021_balanced' is unknown for "
                                                         "data=law_school; allowed: none (this card has no recipes)"),
    (["data=adult_ffpdg", "data.recipe=xu2021_pc"], "data=adult_ffpdg already names the recipe xu2023_ffpdg"),
    (["data=adult/nope"], "data.recipe='nope' is unknown for data=adult"),
    (["data=adult_ffpdgg"], "data='adult_ffpdgg' is unknown; allowed: adult, bank"),
])
def test_an_unknown_recipe_is_refused_in_one_line_naming_what_is_allowed(overrides, message):
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")) as err:
        compose.prevalidate(overrides)
    assert "\n" not in str(err.value)


def test_every_experiment_sweeps_datasets_and_recipes_not_old_names():
    for name in group_options("experiment"):
        params = OmegaConf.to_container(load_node("experiment", name)).get("hydra", {}).get("sweeper", {}).get(
            "params", {})
        for value in str(params.get("data", "")).split(","):
            assert value not in DATA_ALIASES, (name, value)
            if "/" in value:
                assert data_choice(value) == value, (name, value)


def test_the_parse_cache_tells_recipes_apart():
    digests = ["0" * 64]
    keys = {data_lib._cache_key(load_card(option), digests) for option in ("adult", *(
        f"adult/{r}" for r in recipes("adult")))}
    assert len(keys) == 1 + len(recipes("adult"))
    ssl = load_card("adult", recipe="zhang2022_ssl")
    assert data_lib._cache_key(ssl, digests) != data_lib._cache_key(ssl | {"recipe": "other"}, digests)


def test_the_cli_refuses_an_unknown_recipe_in_one_line(capsys):
    from privfair_cli.main import main

    assert main(["run", "algo=lr", "data=adult", "data.recipe=xu2023"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("privfair: error: data.recipe='xu2023' is unknown for data=adult; allowed: ")
    assert "xu2023_ffpdg" in err and "\n" not in err
