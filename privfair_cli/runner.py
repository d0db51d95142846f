"""One run: validate, load, split, fit through the ledger, evaluate, write. Called once per Hydra job."""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from privfair_cli import __version__, evaluate, registry, results, schema
from privfair_cli import datasets as data_lib
from privfair_cli.errors import DataError
from privfair_cli.privacy import Budget, PrivacyLedger


def resolve_device(device: str, plugin_cuda: bool) -> str:
    if device == "cpu" or not plugin_cuda:
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise DataError("device=cuda was asked for but no CUDA device is visible; use device=auto or cpu")
    return "cpu"


def streams(seed: int) -> dict[str, np.random.Generator]:
    """Independent RNG streams per run: data generation, train/test split, the algorithm's noise, evaluation.
    The data stream depends on the seed only, so changing eps never changes the data."""
    names = ("data", "split", "noise", "eval")
    return {n: np.random.default_rng(np.random.SeedSequence([seed, i])) for i, n in enumerate(names)}


def load_data(card: schema.DataCard, rng: dict[str, np.random.Generator], log=print):
    table = data_lib.load(card.raw, rng["data"])
    if card.n is not None and card.n < len(table):
        table = table.subset(np.sort(rng["data"].choice(len(table), size=card.n, replace=False)))
    if card.expected_d is not None and table.d != card.expected_d:
        msg = f"data={card.name}: d={table.d} features, the spec expects {card.expected_d}"
        if not card.allow_d_mismatch:
            raise DataError(msg + " (set data.allow_d_mismatch=true to run anyway)")
        log(f"warning: {msg}")
    return table


def environment(device: str) -> dict:
    from importlib.metadata import version

    from privfair_cli.sweep import thread_cap

    env = {"privfair": __version__, "python": platform.python_version(), "numpy": np.__version__,
           "torch": version("torch"), "platform": platform.platform(), "device": device, "threads": thread_cap()}
    if device == "cuda":
        import torch

        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def same_run(stored: Path, cfg: DictConfig) -> bool:
    """Whether a stored config describes the same run: everything but the experiment's `reproduce:` block
    (comparison metadata such as the reasons for deviating cells) must be equal."""
    if not stored.is_file():
        return False
    old = OmegaConf.to_container(OmegaConf.load(stored))
    new = OmegaConf.to_container(cfg, resolve=True)
    old.pop("reproduce", None)
    new.pop("reproduce", None)
    return old == new


def run(cfg: DictConfig, run_dir: Path, log=print) -> dict:
    rc = schema.validate(cfg)
    run_dir = Path(run_dir)
    config_yaml = OmegaConf.to_yaml(cfg, resolve=True)
    if results.is_complete(run_dir) and not rc.overwrite:
        if same_run(run_dir / "config.yaml", cfg):
            log(f"skip (complete): {run_dir} already holds this run; overwrite=true redoes it")
            return json.loads((run_dir / "metrics.json").read_text())
        log(f"re-running: the config differs from the one stored in {run_dir}")
    results.clear_run(run_dir)  # a failed or outdated attempt's outcome goes before this one starts
    timings = {}
    t0 = time.perf_counter()
    rng = streams(rc.seed)
    table = load_data(rc.data, rng, log)
    train, test = data_lib.split(table, rc.data.test_size, rng["split"])
    timings["load"] = time.perf_counter() - t0

    cls = registry.get(rc.algo)
    device = resolve_device(rc.device, cls.cuda)
    plugin = cls(rc.params, rc.mechanism) if cls.Config is not None else cls(**rc.params, mechanism=rc.mechanism)
    budget = Budget(rc.eps, rc.delta)
    own = rc.params.get("accountant") if isinstance(rc.params, dict) else getattr(rc.params, "accountant", None)
    ledger = PrivacyLedger(
        budget,
        accountant=own or rc.budget.get("accountant") or cls.accountant,
        rdp_conversion=rc.budget.get("rdp_conversion", "classic"),
    )
    t1 = time.perf_counter()
    plugin.fit(train, budget, ledger, rng["noise"], device)
    ledger.check()
    timings["fit"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    evaluator = getattr(plugin, "evaluate", None) or (
        lambda tr, te, r: evaluate.EVALUATORS[cls.kind](plugin, tr, te, r))
    metrics = evaluator(train, test, rng["eval"])
    metrics |= {"n_train": len(train), "n_test": len(test), "d": table.d}
    metrics |= plugin.extra_metrics()
    timings["evaluate"] = time.perf_counter() - t2
    run_dir.mkdir(parents=True, exist_ok=True)
    plugin.artifacts(run_dir)
    timings["total"] = time.perf_counter() - t0

    record = {
        "algo": rc.algo,
        "data": rc.data.name,
        "eps": rc.eps,
        "delta": rc.delta,
        "seed": rc.seed,
        "metrics": {k: float(v) for k, v in metrics.items()},
        "privacy": ledger.to_dict() | {"private": cls.private, "noise": "seeded"},
        "guarantee": plugin.claims(),
        "warnings": plugin.warnings(),
        "timings": timings,
        "env": environment(device) | {"argv": " ".join(sys.argv[1:])},
    }
    results.write_run(run_dir, config_yaml, record)
    return record
