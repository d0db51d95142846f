"""Where the configs are, which options each config group offers, and the names that stand for others.

Datasets (DESIGN, "Datasets, views and recipes"): `configs/data/<dataset>.yaml` is the one card of a raw dataset;
a paper's own preprocessing of it is a *recipe*, `configs/data/<dataset>/<recipe>.yaml`, named
`<first author><year>_<what>` like the experiments that use it (`xu2023_ffpdg`, `zhang2022_ssl`). A recipe is
chosen with `data=<dataset> data.recipe=<recipe>`, which `canonical_overrides` turns into the Hydra group option
`data=<dataset>/<recipe>` (also accepted as typed, and the form the experiment configs sweep over). The cards each
recipe replaces (`adult_ffpdg`, ...) are aliases (DATA_ALIASES): a recipe composes to exactly the data config the
old card composed to, under the old card's `name` (so its runs keep their folders and run ids), plus `recipe:`.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from privfair_cli.errors import ConfigError


def config_dir() -> Path:
    """$PRIVFAIR_CONFIG_DIR, else the checkout's `configs/`, else the copy an installed package carries."""
    env = os.environ.get("PRIVFAIR_CONFIG_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    checkout = here.parent / "configs"
    return checkout if (checkout / "config.yaml").is_file() else here / "configs"


# Folders of the user's own configs (`privfair run --config-dir DIR`, or this variable, several joined by the path
# separator): their groups add to the shipped ones (`DIR/data/credit.yaml` is `data=credit`), and a name they share
# with a shipped config replaces it. Hydra is given them as its search path.
USER_CONFIG_ENV = "PRIVFAIR_CONFIG_PATH"


def user_dirs() -> list[Path]:
    """The user's config folders ($PRIVFAIR_CONFIG_PATH), first one first."""
    return [Path(p).expanduser().resolve() for p in os.environ.get(USER_CONFIG_ENV, "").split(os.pathsep) if p]


def search_dirs() -> list[Path]:
    """Where a config is looked up: the user's folders, then the shipped `configs/`."""
    return [*user_dirs(), config_dir()]


def searchpath_override() -> list[str]:
    """The Hydra override that adds the user's config folders to its search path (none without them)."""
    dirs = user_dirs()
    return [f"hydra.searchpath=[{','.join(f'file://{d}' for d in dirs)}]"] if dirs else []


def add_user_dir(folder: Path) -> None:
    """Put `folder` first among the user's config folders, for this process and the runs it starts."""
    current = os.environ.get(USER_CONFIG_ENV, "")
    os.environ[USER_CONFIG_ENV] = os.pathsep.join([str(Path(folder).expanduser().resolve())] +
                                                  ([current] if current else []))


def user_configs(args: list[str]) -> list[str]:
    """`args` without `--config-dir DIR` (each DIR is added as a user config folder) and with `data=<path>.yaml` (a
    card file anywhere) as `data=<its name>`, its folder made a user config folder for this process (a temporary
    `data/` folder holding a link to it). Raises a one-line ConfigError for a missing folder or card file."""
    import atexit
    import shutil
    import tempfile

    out, it = [], iter(args)
    for arg in it:
        if arg == "--config-dir" or arg.startswith("--config-dir="):
            folder = arg.partition("=")[2] or next(it, "")
            if not folder or not Path(folder).expanduser().is_dir():
                raise ConfigError(f"--config-dir {folder or '(missing)'}: not a folder; give a folder holding "
                                  "data/, algo/ or experiment/ configs of your own")
            add_user_dir(Path(folder))
            continue
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "data" and value.endswith((".yaml", ".yml")):
            card = Path(value).expanduser()
            if not card.is_file():
                raise ConfigError(f"data={value}: no such card file; give a dataset name (privfair list) or the "
                                  "path of a card .yaml of your own (docs/usage.md, 'Your own data')")
            folder = Path(tempfile.mkdtemp(prefix="privfair-card-"))
            atexit.register(shutil.rmtree, folder, True)
            (folder / "data").mkdir()
            (folder / "data" / f"{card.stem}.yaml").symlink_to(card.resolve())
            add_user_dir(folder)
            arg = f"{key}={card.stem}"
        out.append(arg)
    return out


def find_config(group: str, name: str) -> Path | None:
    """`<dir>/<group>/<name>.yaml` in the first search folder that has it."""
    return next((p for d in search_dirs() if (p := d / group / f"{name}.yaml").is_file()), None)


def group_options(group: str) -> list[str]:
    """The options of a config group (for `data`: the datasets; their recipes: `recipes`), shipped and the user's."""
    return sorted({p.stem for d in search_dirs() for p in (d / group).glob("*.yaml")})


# Experiments are named `<first author><year>_<table>`; the paper-named prefixes they had before still work.
EXPERIMENT_ALIASES = {"prefair2023_": "pujol2023_", "ffpdg2023_": "xu2023_"}

# The cards that were a paper's preprocessing of a dataset, now that dataset's recipes: `data=<old>` is
# `data=<dataset> data.recipe=<recipe>`. xu2021: Depeng Xu's thesis, zhang2022: Tao Zhang's thesis, ding2020: PDFC,
# xu2023: FFPDG.
DATA_ALIASES = {
    "adult_3k": "adult/zhang2022_crfs",
    "adult_balanced": "adult/xu2021_balanced",
    "adult_cfgan": "adult/xu2021_cfgan",
    "adult_fairgan": "adult/xu2021_fairgan",
    "adult_ffpdg": "adult/xu2023_ffpdg",
    "adult_pc": "adult/xu2021_pc",
    "adult_race": "adult/ding2020_race",
    "adult_ssl": "adult/zhang2022_ssl",
    "bank_es": "bank/zhang2022_es",
    "bank_fair_ssl": "bank/zhang2022_fair_ssl",
    "bank_ssl": "bank/zhang2022_ssl",
    "compas_ffpdg": "compas/xu2023_ffpdg",
    "dutch_unbalanced": "dutch/xu2021_unbalanced",
    "german_age": "german/zhang2022_age",
    "health_es": "health/zhang2022_es",
    "health_fair_ssl": "health/zhang2022_fair_ssl",
    "health_ssl": "health/zhang2022_ssl",
    "mnist_unbalanced": "mnist/xu2021_unbalanced",
    "synth_fes_da2": "synth_fes/zhang2022_da2",
    "titanic_crfs": "titanic/zhang2022_crfs",
    "titanic_fair_ssl": "titanic/zhang2022_fair_ssl",
}
NO_RECIPE = ("null", "none", "")  # `data.recipe=null`: the card itself


def experiment_name(name: str) -> str:
    """The experiment an older name stands for (`prefair2023_table3` -> `pujol2023_table3`); others as given."""
    for old, new in EXPERIMENT_ALIASES.items():
        if name.startswith(old):
            return new + name[len(old):]
    return name


def recipes(dataset: str) -> list[str]:
    """The recipes of a dataset card (`configs/data/<dataset>/<recipe>.yaml`)."""
    return group_options(f"data/{dataset}")


def data_options() -> list[str]:
    """Every `data=` choice: each dataset, then each of its recipes as `<dataset>/<recipe>`."""
    return [o for d in group_options("data") for o in [d] + [f"{d}/{r}" for r in recipes(d)]]


def data_choice(value: str, recipe: str | None = None) -> str:
    """The Hydra option of `data=<value>` with `data.recipe=<recipe>`: `<dataset>` or `<dataset>/<recipe>`; an
    old card name (DATA_ALIASES) as its recipe; `data.recipe=null` is the card itself. Raises a one-line ConfigError
    naming what is allowed."""
    typed, value = value, DATA_ALIASES.get(value, value)
    dataset, _, own = value.partition("/")
    if dataset not in group_options("data"):
        raise ConfigError(f"data={dataset!r} is unknown; allowed: {', '.join(group_options('data'))} (or an older "
                          f"card name: {', '.join(DATA_ALIASES)})")
    if recipe is None:
        recipe = own or None
    elif recipe.lower() in NO_RECIPE:  # data.recipe=null: the card itself
        return dataset
    elif own and own != recipe:
        raise ConfigError(f"data={typed} already names the recipe {own}; give data={dataset} data.recipe={recipe}")
    if recipe is None:
        return dataset
    if recipe not in recipes(dataset):
        allowed = ", ".join(recipes(dataset)) or "none (this card has no recipes)"
        raise ConfigError(f"data.recipe={recipe!r} is unknown for data={dataset}; allowed: {allowed}")
    return f"{dataset}/{recipe}"


def canonical_overrides(overrides: list[str]) -> list[str]:
    """The overrides with every name in its current form: `experiment=<older name>` (also with `+`) as the
    experiment's name now; `data=<old card>` and `data=<dataset> data.recipe=<recipe>` as the Hydra option
    `data=<dataset>/<recipe>` (swept values too: `data=adult,compas data.recipe=xu2023_ffpdg` is two jobs).
    Without `data=`, `data.recipe` applies to the default dataset (configs/config.yaml)."""
    out, data_at, recipe_at = [], None, None
    for item in overrides:
        key, sep, value = item.partition("=")
        bare = key.lstrip("+~")
        if sep and bare == "experiment":
            item = f"{key}={experiment_name(value)}"
        elif sep and bare == "data.recipe" and not key.startswith("~"):
            recipe_at = len(out)
        elif sep and bare == "data" and not key.startswith("~"):
            data_at = len(out)
        out.append(item)
    if data_at is None and recipe_at is None:
        return out
    from privfair_cli.compose import prefix, split_overrides, values

    data = split_overrides([out[data_at]])[0] if data_at is not None else None
    recipe_values = values(split_overrides([out[recipe_at]])[0]) if recipe_at is not None else [None]
    datasets = values(data) if data is not None else [default_data()]
    choices = list(dict.fromkeys(data_choice(d, r) for d, r in itertools.product(datasets, recipe_values)))
    line = f"{prefix(data) if data is not None else 'data'}={','.join(choices)}"
    if data_at is not None:
        out[data_at] = line
    if recipe_at is not None:
        out[recipe_at] = None if data_at is not None else line
    return [item for item in out if item is not None]


def default_data() -> str:
    """The `data` choice of configs/config.yaml's defaults list."""
    from omegaconf import OmegaConf

    for entry in OmegaConf.load(find_config(".", "config") or config_dir() / "config.yaml").get("defaults", []):
        if isinstance(entry, dict) or OmegaConf.is_dict(entry):
            if "data" in entry:
                return str(entry["data"])
    raise ConfigError("configs/config.yaml names no default data card; give data=<dataset>")


def load_card(name: str, recipe: str | None = None) -> dict:
    """The dataset card `data=<name>` (with `data.recipe=<recipe>`) as a run composes it, without Hydra: the keys
    every card holds (`data_defaults/default.yaml`), then the card or recipe with what its `defaults` list names.
    `name` may be a dataset, `<dataset>/<recipe>`, or an older card name (DATA_ALIASES)."""
    from omegaconf import OmegaConf

    base = find_config("data_defaults", "default")
    parts = [OmegaConf.load(base)] if base else []
    node = load_node("data", data_choice(name, recipe))
    return OmegaConf.to_container(OmegaConf.merge(*parts, node), resolve=True)


def load_node(group: str, name: str, root: Path | None = None):
    """`configs/<group>/<name>.yaml` (or the user's, `find_config`) merged over the configs its `defaults` list
    names (the composition Hydra does for a group option), without Hydra; `root` is another checkout's
    `configs/`. As in Hydra, an entry is relative to the folder of the config that names it (`files/adult`), or
    absolute from `configs/` (`/data/adult`); `@_here_` merges it into this node."""
    from omegaconf import OmegaConf, open_dict

    path = root / group / f"{name}.yaml" if root else find_config(group, name)
    if path is None or not path.is_file():
        options = data_options() if group == "data" and root is None else group_options(group)
        raise ConfigError(f"{group}={name!r} is unknown; allowed: {', '.join(options)}")
    node = OmegaConf.load(path)
    with open_dict(node):
        entries = list(node.pop("defaults", None) or ["_self_"])
    if "_self_" not in entries:
        entries.append("_self_")
    folder = str(Path(group, name).parent)  # the config's own group (`data`, or `data/adult` for a recipe)
    parts = []
    for entry in map(str, entries):
        if entry == "_self_":
            parts.append(node)
            continue
        entry = entry.removesuffix("@_here_")  # `files/adult@_here_`: a shared block merged into this node
        where, _, option = (entry[1:] if entry.startswith("/") else f"{folder}/{entry}").rpartition("/")
        parts.append(load_node(where, option, root))
    return OmegaConf.merge(*parts)
