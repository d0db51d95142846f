"""Where the configs are and which options each config group offers."""

from __future__ import annotations

import os
from pathlib import Path


def config_dir() -> Path:
    """$PRIVFAIR_CONFIG_DIR, else the checkout's `configs/`, else the copy an installed package carries."""
    env = os.environ.get("PRIVFAIR_CONFIG_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    checkout = here.parent / "configs"
    return checkout if (checkout / "config.yaml").is_file() else here / "configs"


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


# Experiments are named `<first author><year>_<table>`; the paper-named prefixes they had before still work.
EXPERIMENT_ALIASES = {"prefair2023_": "pujol2023_", "ffpdg2023_": "xu2023_"}


def experiment_name(name: str) -> str:
    """The experiment an older name stands for (`prefair2023_table3` -> `pujol2023_table3`); others as given."""
    for old, new in EXPERIMENT_ALIASES.items():
        if name.startswith(old):
            return new + name[len(old):]
    return name


def canonical_overrides(overrides: list[str]) -> list[str]:
    """`experiment=<older name>` (also with `+`) as the experiment's name now."""
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        out.append(f"{key}={experiment_name(value)}" if sep and key.lstrip("+") == "experiment" else item)
    return out



def load_card(name: str) -> dict:
    """The dataset card `data=<name>` as a run composes it, without Hydra: the keys every card holds
    (`data_defaults/default.yaml`), then the card with the cards its `defaults` list names."""
    from omegaconf import OmegaConf

    base = config_dir() / "data_defaults" / "default.yaml"
    parts = [OmegaConf.load(base)] if base.is_file() else []
    return OmegaConf.to_container(OmegaConf.merge(*parts, load_node("data", name)), resolve=True)


def load_node(group: str, name: str, root: Path | None = None):
    """`configs/<group>/<name>.yaml` merged over the options of the same group its `defaults` list names (the
    composition Hydra does for a group option), without Hydra; `root` is another checkout's `configs/`."""
    from omegaconf import OmegaConf, open_dict

    from privfair_cli.errors import ConfigError

    name = name.removesuffix("@_here_")  # `files/adult@_here_`: a shared block merged into this node
    path = (root or config_dir()) / group / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"{group}={name!r} is unknown; allowed: {', '.join(group_options(group))}")
    node = OmegaConf.load(path)
    with open_dict(node):
        entries = list(node.pop("defaults", None) or ["_self_"])
    if "_self_" not in entries:
        entries.append("_self_")
    return OmegaConf.merge(*(node if e == "_self_" else load_node(group, str(e), root) for e in entries))
