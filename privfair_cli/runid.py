"""The identity of a run, which names its folder: `.../eps=<eps>/seed=<seed>-<short id>` (DESIGN, results folder).

A run's identity is its resolved config minus the keys that do not change what it computes (VOLATILE):
`overwrite` (whether to redo it), `device` (where it runs: auto, cpu or cuda give the same run; a result from
one device is reused on another) and `reproduce` (an experiment's comparison metadata: published table, reasons
for deviating cells). Numbers compare by value, so `eps=1` and `eps=1.0` are the same run. The short id is the
first 8 hex digits of the sha256 of that identity as sorted JSON.

A dataset recipe's name (`data.recipe`, BOOKKEEPING) is left out too: it says where the data keys came from, and
those keys are in the identity, so `data=adult data.recipe=xu2023_ffpdg` is the same run as the card `adult_ffpdg`
it replaced, stored before recipes existed.

A key added to a config after runs were stored (ADDED) is left out of the identity while it holds the value that
computes what the runs without it computed: adding an option renames (and so orphans) no stored run, and a run
stored before the key existed resumes as the same run.

Hydra's `hydra.run.dir` and `hydra.sweep.subdir` (configs/config.yaml) reach it through the `${run_id:}`
resolver registered when this module is imported, and write eps by value through `${num:${eps}}`; the
in-process sweep calls `short_id` and `number_text` on the same config, so both name the same folder and either
resumes what the other wrote.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

VOLATILE = ("overwrite", "device", "reproduce")
BOOKKEEPING = (("data", "recipe"),)  # key paths naming where other keys came from
# key path -> its neutral value (the computation before the key existed); only for keys whose plugins all lacked
# them before, since a plugin that always had the key would see its runs at that value renamed
ADDED: dict[tuple[str, ...], float | str | None] = {
    ("algo", "momentum"): 0.0,  # DP-SGD family: plain SGD step
    ("algo", "accounting"): "rdp",  # DP-SGD family: the RDP accountant with budget.rdp_conversion
    # DP-SGD family: `auto` as the thesis' values (the GAN families' `profile` is full | fast | smoke, never paper)
    ("algo", "profile"): "paper",
    # FairGAN / CFGAN families: `schedule: paper` trains the configured epochs (the default trains a short schedule);
    # the experiments pin paper, also for the real-data and baseline plugins they sweep with the GANs (which ignore it)
    ("algo", "schedule"): "paper",
    ("algo", "dpwgan_accounting"): "rdp",  # FFPDG's DP-WGAN: the RDP accountant its runs used before (default pld)
    ("data", "unlabelled_size"): "auto",  # every card: a card without the key had no pool (auto derives it)
    # every card: the options of the views derived on demand (datasets/views.py), which no run derived before
    ("data", "views", "enumerable", "cells"): "auto",
    ("data", "views", "enumerable", "bins"): "auto",
    ("data", "views", "enumerable", "keep"): None,
    ("data", "views", "causal", "tau"): 0.01,
    ("data", "views", "causal", "max_nodes"): None,
    ("data", "views", "causal", "max_order"): None,
}
EXACT_INT = 2 ** 53  # integers below this are compared as floats without loss


def _canonical(value):
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < EXACT_INT:
        return float(value)
    return value


def identity(cfg: DictConfig | dict) -> dict:
    """The resolved config without VOLATILE and BOOKKEEPING keys, an ADDED key at its neutral value, and Hydra's own
    `hydra` node."""
    out = {}
    for key in cfg:
        if key in VOLATILE or key == "hydra":
            continue
        value = cfg[key]
        out[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    out = _canonical(out)
    for parent, key in BOOKKEEPING:
        if isinstance(out.get(parent), dict):
            out[parent].pop(key, None)
    for path, neutral in ADDED.items():
        nodes = [out]  # the blocks along the path
        for part in path[:-1]:
            nodes.append(nodes[-1].get(part) if isinstance(nodes[-1], dict) else None)
        node = nodes[-1]
        if not isinstance(node, dict) or path[-1] not in node:
            continue
        value = node[path[-1]]
        if isinstance(value, bool) or (value is None) != (neutral is None) or _canonical(value) != _canonical(neutral):
            continue
        del node[path[-1]]
        for depth in range(len(path) - 1, 1, -1):  # a block the deletion left empty goes too (`views: {}`)
            if nodes[depth]:
                break
            del nodes[depth - 1][path[depth - 1]]
    return out


def stored_identity(config_yaml: Path) -> dict:
    """The identity of a stored run from its resolved `config.yaml`, read with PyYAML's C loader (a resumed sweep
    checks every folder: 9 ms for an Adult config, 155 ms through OmegaConf.load)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return identity(yaml.load(Path(config_yaml).read_text(), Loader=loader))


def short_id(cfg: DictConfig) -> str:
    text = json.dumps(identity(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """`key: old -> new` for each leaf that differs between two identities."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a} -> {b}")
    return out


def number_text(value) -> str:
    """A folder level's value, numbers by value: `eps=1` and `eps=1.0` both give `1.0`."""
    canonical = _canonical(value)
    return repr(canonical) if isinstance(canonical, float) else str(value)


def _resolve(*, _root_: DictConfig) -> str:
    return short_id(_root_)


if not OmegaConf.has_resolver("run_id"):
    OmegaConf.register_new_resolver("run_id", _resolve)
    OmegaConf.register_new_resolver("num", number_text)
