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
