"""A dataset the project has never seen, described by a card and no Python, runs through every algorithm of the
kinds a table serves (classifiers, generators, graph learners, semi-supervised learners, attacks): the views
those algorithms need beyond the card (an unlabelled pool, a reference graph, a causal graph over binarised
nodes, an enumerable discrete view) are derived, and the algorithms that need what no table gives (a network,
bags of tokens) are the only ones it refuses; the same holds for the card without its `discrete:` section (every
discrete view derived from the declared bounds and levels)."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf, open_dict

from privfair_cli import compose, registry, runner, schema
from privfair_cli.config import config_dir
from privfair_cli.results import METRICS_KEYS
from tests.test_compat import SMALL

ROWS = 400
TABLE_KINDS = ("classifier", "generator", "graph", "semi_supervised", "attack")
NOT_FROM_A_TABLE = {"network", "tokens"}  # views no table provides
PLUGINS = registry.load_plugins()


def write_credit_csv(folder) -> None:
    """A small credit table: two numeric columns, a categorical one, a sensitive attribute and a label that
    depends on them."""
    rng = np.random.default_rng(7)
    age = rng.integers(18, 80, ROWS)
    limit = rng.integers(1, 50, ROWS) * 1000
    purpose = rng.choice(["car", "home", "study"], ROWS)
    group = rng.choice(["a", "b"], ROWS, p=[0.6, 0.4])
    score = 0.03 * (age - 45) + limit / 25000 + (purpose == "home") - 0.5 * (group == "b")
    label = np.where(score + rng.normal(0, 1, ROWS) > 0.5, "good", "bad")
    folder.mkdir(parents=True)
    pd.DataFrame({"age": age, "limit": limit, "purpose": purpose, "group": group, "label": label}).to_csv(
        folder / "credit.csv", index=False)


def credit_card() -> dict:
    """The card a user writes for it (README: "Your own data"), with the keys every card has."""
    defaults = OmegaConf.to_container(OmegaConf.load(config_dir() / "data_defaults" / "default.yaml"))
    return defaults | {
        "name": "credit", "subdir": "credit", "files": {"credit.csv": {}}, "verify": False,
        "format": {"sep": ",", "header": True},
        "label": "label", "positive": ["good"], "sensitive": "group", "privileged": "a",
        "features": {"numeric": {"age": [18, 80], "limit": [0, 50000]}, "onehot": ["purpose"],
                     "levels": {"purpose": ["car", "home", "study"]}},
        "discrete": {"age": {"bins": [18, 30, 45, 60, 81]}, "limit": {"bins": [0, 10000, 25000, 50001]},
                     "purpose": {"levels": ["car", "home", "study"]}, "group": {"levels": ["a", "b"]},
                     "label": {"one_of": ["good"]}},
        "roles": {"protected": ["group"], "admissible": ["age", "limit"], "outcome": ["label"]},
    }


def bare_credit_card() -> dict:
    """The same card without its `discrete:` section: the discrete, enumerable and causal views derive theirs from
    the declared bounds and levels."""
    return {k: v for k, v in credit_card().items() if k != "discrete"}


def table_algorithms() -> list[str]:
    return sorted(a for a, cls in PLUGINS.items() if cls.kind in TABLE_KINDS)


@pytest.mark.parametrize("make_card", [credit_card, bare_credit_card])
def test_only_what_no_table_gives_keeps_an_algorithm_off_a_user_card(make_card):
    views = schema.card_views(make_card())
    refused = {a: schema.missing_views(PLUGINS[a].requirements(registry.defaults(a)), views)
               for a in table_algorithms()}
    refused = {a: m for a, m in refused.items() if m}
    assert all(set(m) <= NOT_FROM_A_TABLE for m in refused.values()), refused
    assert set(refused) == {a for a in table_algorithms() if set(PLUGINS[a].requirements(registry.defaults(a)))
                            & NOT_FROM_A_TABLE}


@pytest.fixture(scope="module")
def user_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("user")
    write_credit_csv(root / "data" / "credit")
    return root


def runnable(make_card) -> list:
    return [pytest.param(a, make_card, id=f"{a}-{make_card.__name__}") for a in table_algorithms()
            if not schema.missing_views(PLUGINS[a].requirements(registry.defaults(a)), schema.card_views(make_card()))]


@pytest.mark.parametrize("algo,make_card", runnable(credit_card) + runnable(bare_credit_card))
def test_a_user_card_runs_through_every_algorithm_that_can_use_it(algo, make_card, user_data, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setenv("PRIVFAIR_DATA_DIR", str(user_data / "data"))
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(user_data / "cache"))
    cfg = copy.deepcopy(compose.compose([f"algo={algo}"]))
    with open_dict(cfg):
        cfg.data = OmegaConf.create(make_card())
        for line in SMALL.get(algo, []):
            key, value = line.split("=", 1)
            OmegaConf.update(cfg, key, yaml.safe_load(value))
    record = runner.run(cfg, tmp_path / "run", log=lambda *_: None)
    assert tuple(record) == METRICS_KEYS and record["data"] == "credit"
    assert record["metrics"]["n_train"] > 0


def _card_file(folder, data_dir) -> None:
    """The user's card as a file of their own, its data in `data_dir` (the card's `dir:`)."""
    card = {k: v for k, v in credit_card().items() if k in ("name", "files", "verify", "format", "label",
                                                            "positive", "sensitive", "privileged", "features")}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "credit.yaml").write_text(yaml.safe_dump(card | {"dir": str(data_dir)}))


def test_a_card_file_outside_the_project_runs_from_the_command_line(user_data, tmp_path, monkeypatch, capsys):
    """`privfair run data=path/to/card.yaml` and `privfair run --config-dir DIR data=<name>`: the user's card adds
    to the shipped ones without touching the package; a missing file or folder is a one-line error."""
    from privfair_cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRIVFAIR_CONFIG_PATH", "")  # restored after the test (the run adds to it)
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path / "cache"))
    _card_file(tmp_path / "cards", user_data / "data" / "credit")
    assert main(["run", "algo=lr", f"data={tmp_path / 'cards' / 'credit.yaml'}", "hydra.run.dir=one"]) == 0
    record = yaml.safe_load((tmp_path / "one" / "metrics.json").read_text())
    assert record["data"] == "credit" and record["metrics"]["n_train"] + record["metrics"]["n_test"] == ROWS

    monkeypatch.setenv("PRIVFAIR_CONFIG_PATH", "")  # restored after the test (the run adds to it)
    _card_file(tmp_path / "mine" / "data", user_data / "data" / "credit")
    assert main(["run", "--config-dir", str(tmp_path / "mine"), "-m", "algo=lr,pflr", "data=credit", "eps=1",
                 "hydra.sweep.dir=sweep"]) == 0
    assert len(list((tmp_path / "sweep").rglob("metrics.json"))) == 2
    capsys.readouterr()

    assert main(["run", "algo=lr", "data=cards/none.yaml"]) == 2
    assert "data=cards/none.yaml: no such card file" in capsys.readouterr().err
    assert main(["run", "--config-dir", "nowhere", "algo=lr"]) == 2
    assert "--config-dir nowhere: not a folder" in capsys.readouterr().err


def test_a_generator_says_which_declared_features_its_release_leaves_out(user_data, tmp_path, monkeypatch):
    """A card whose `discrete:` section omits a declared feature: the generator's release has no such column, and
    the result says so instead of dropping it silently."""
    monkeypatch.setenv("PRIVFAIR_DATA_DIR", str(user_data / "data"))
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(user_data / "cache"))
    card = credit_card()
    del card["discrete"]["limit"]
    card["roles"]["admissible"] = ["age"]
    cfg = copy.deepcopy(compose.compose(["algo=mst"]))
    with open_dict(cfg):
        cfg.data = OmegaConf.create(card)
    record = runner.run(cfg, tmp_path / "run", log=lambda *_: None)
    assert any(w.startswith("the release leaves out limit:") for w in record["warnings"]), record["warnings"]
    released = pd.read_csv(next((tmp_path / "run").rglob("synthetic.csv.gz")))
    assert "limit" not in released.columns and "age" in released.columns
