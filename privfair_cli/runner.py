"""One run: validate, resume or load, split, fit through the ledger, evaluate, write (results.Attempt: staged,
swapped in only when complete). Called once per job, by Hydra's launchers and by the in-process sweep."""

from __future__ import annotations

import math
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from privfair_cli import __version__, evaluate, progress, registry, results, runid, schema, seedbatch
from privfair_cli import datasets as data_lib
from privfair_cli.errors import DataError, RunFolderTaken, TrainingFailed
from privfair_cli.privacy import Budget, NoiseSource, PrivacyLedger, to_json
from privfair_cli.threads import thread_cap


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


_WARNED: set[str] = set()  # width mismatches already told in this process (a sweep says it once, not per run)


def load_data(card: schema.DataCard, rng: dict[str, np.random.Generator], log=print):
    table = data_lib.load(card.raw, rng["data"])
    if card.n is not None and card.n < len(table):
        table = table.subset(np.sort(rng["data"].choice(len(table), size=card.n, replace=False)))
    if card.expected_d is not None and table.d != card.expected_d:
        msg = f"data={card.name}: d={table.d} features, the spec expects {card.expected_d}"
        if not card.allow_d_mismatch:
            raise DataError(f"{msg} (set {data_lib.hint(card.raw, 'allow_d_mismatch', True)} to run anyway)")
        if msg not in _WARNED:
            _WARNED.add(msg)
            log(f"warning: {msg} (the card allows it; its comments say why)")
    return table


def environment(device: str) -> dict:
    from importlib.metadata import version

    env = {"privfair": __version__, "python": platform.python_version(), "numpy": np.__version__,
           "torch": version("torch"), "platform": platform.platform(), "device": device, "threads": thread_cap()}
    if device == "cuda":
        import torch

        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def stored_result(run_dir: Path, cfg: DictConfig, overwrite: bool, log=print) -> dict | None:
    """The record of `run_dir` when it already holds this run complete and `overwrite` is off (resume), else None.
    Raises RunFolderTaken when it holds a complete result of another config (runid.identity differs)."""
    stored, _ = results.read_record(run_dir)
    if stored is None:
        return None
    try:
        differs = runid.differences(runid.stored_identity(run_dir / "config.yaml"), runid.identity(cfg))
    except Exception as err:  # an unreadable config.yaml (I/O, YAML): whose result it holds cannot be told
        differs = [f"its config.yaml cannot be read ({type(err).__name__})"]
    if differs:
        shown = "; ".join(differs[:3]) + (f"; {len(differs) - 3} more" if len(differs) > 3 else "")
        raise RunFolderTaken(f"{run_dir} holds a complete result of another config ({shown}); a run never "
                             f"replaces it: choose another folder (hydra.run.dir / hydra.sweep.dir) or remove it")
    if overwrite:
        return None
    log(f"skip (complete): {run_dir} already holds this run; overwrite=true redoes it")
    return stored


def guarantee(plugin: registry.Plugin, ledger: PrivacyLedger) -> str:
    """What a result may claim (registry.GUARANTEES): the plugin's claim for this instance; `none` when the spend
    is infinite (the noise-free limit, eps = inf); `(eps,delta)-DP` for an eps-DP plugin whose spend the accountant
    composed into an (eps, delta) statement (zcdp, rdp, or an (eps, delta) release)."""
    claim = plugin.claim()
    eps, delta = ledger.spent()
    if claim == "none" or math.isinf(eps):
        return "none"
    if claim == "eps-DP" and delta > 0:
        return "(eps,delta)-DP"
    return claim


SCORE_METHODS = ("predict_proba", "decision", "scores")  # how the classifier families expose their scores


def nonfinite_model(plugin, X) -> str | None:
    """Why a trained classifier's scores (its first of SCORE_METHODS, else its weights `W`) are not all finite, or
    None; a NaN score still yields a 0/1 prediction, so accuracy alone would hide a diverged model."""
    method = next((m for m in SCORE_METHODS if callable(getattr(plugin, m, None))), None)
    values = getattr(plugin, method)(X) if method else getattr(plugin, "W", None)
    if values is None:
        return None
    values = np.asarray(values, dtype=float)
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    if method is None:
        return f"has {int(bad.sum())} non-finite weights"
    rows = bad.reshape(len(values), -1).any(axis=1) if values.ndim else bad
    return f"gives non-finite {method} on {int(rows.sum())} of {len(values)} test rows"


def premise_warnings(ledger: PrivacyLedger, n_train: int) -> list[str]:
    """Premises of the guarantee that the runner can check and that failed, one line each."""
    out = []
    _, delta = ledger.spent()
    if delta > 0 and n_train and delta >= 1 / n_train:
        out.append(f"delta={delta:g} >= 1/n_train={1 / n_train:.3g}: at this delta a mechanism may publish a "
                   "record outright; choose delta < 1/n_train")
    return out


CHECKPOINTS = ".checkpoint"  # a run folder's checkpoints of long training (progress.checkpoints)


def run(cfg: DictConfig, run_dir: Path, log=print, overrides: list[str] | None = None, draw=None) -> dict:
    """Validate, then resume or run into a staged attempt swapped in only when complete (results.Attempt). A run
    that raises records why in `failed.json` beside any complete result of the same config, which stays."""
    run_dir = Path(run_dir)
    try:
        rc = schema.validate(cfg)
        record = stored_result(run_dir, cfg, rc.overwrite, log)
        if record is None:
            # long training checkpoints beside the attempt (which is removed on exit), kept until the run commits
            with results.Attempt(run_dir) as attempt, progress.checkpoints(run_dir / CHECKPOINTS):
                record = compute(rc, attempt.artifacts, log, draw)
                attempt.commit(OmegaConf.to_yaml(cfg, resolve=True), record, overrides)
        return record
    except RunFolderTaken:
        raise
    except Exception as err:
        results.write_failure(run_dir, err, overrides)
        raise


@dataclass
class Prepared:
    """A card loaded and split as a run does it: the RNG streams of the seed, the table, train and test parts."""

    rng: dict[str, np.random.Generator]
    table: data_lib.Table
    train: data_lib.Table
    test: data_lib.Table
    notes: list[str] = field(default_factory=list)  # what the derived views chose (the result's warnings)


def prepare(card: schema.DataCard, seed: int, log=print) -> Prepared:
    """Load the card's data with the seed's streams and split it (graph cards per task, datasets/graphs.py), then
    build the views `schema.derive_views` marked for the training rows (datasets/views.py): the one way the runner,
    the auditor, the tests and the benchmarks get a run's data."""
    rng = streams(seed)
    table = load_data(card, rng, log)
    if "graph" in table.meta:
        from privfair_cli.datasets import graphs

        train, test = graphs.split(table, card.raw, rng["split"])
    else:
        train, test = data_lib.split(table, card.test_size, rng["split"], card.unlabelled_size)
    notes = list(card.notes)
    if card.derive:
        from privfair_cli.datasets import views

        for view in card.derive:
            train, test, note = {"causal_graph": views.causal_view, "onehot": views.onehot_view}[view](
                train, test, card.raw)
            notes += [note] if note else []
    return Prepared(rng, table, train, test, notes)


def build(cls: type[registry.Plugin], params, mechanism: str = "default") -> registry.Plugin:
    """The plugin of a validated config: `params` is its typed Config (or the params dict of an untyped one),
    `mechanism` the run's mechanism choice (RunConfig.mechanism)."""
    chosen = {"name": mechanism}
    return cls(params, chosen) if cls.Config is not None else cls(**params, mechanism=chosen)


def fit_plugin(plugin: registry.Plugin, data, budget: Budget, noise, device: str = "cpu", accountant: str = "basic",
               rdp_conversion: str = "classic") -> PrivacyLedger:
    """Fit `plugin` on `data` through a fresh ledger of `budget` under `accountant`, and check the spend: the one
    path from a built plugin to its ledger (the runner, the auditor, the tests and the benchmarks)."""
    ledger = PrivacyLedger(budget, accountant=accountant, rdp_conversion=rdp_conversion)
    fit_data = data_lib.hide_labels(data) if "row_labelled" in data.meta else data
    plugin.fit(fit_data, budget, ledger, noise, device)
    ledger.check()
    return ledger


def compute(rc: schema.RunConfig, artifacts: Path, log=print, draw=None) -> dict:
    """Load, split, fit through the ledger, evaluate; the plugin writes its artifacts into `artifacts`, and
    `draw(artifacts, what_ran)` (the CLI passes `plots.run_figures`) draws its figures before the result is swapped
    in."""
    timings = {}
    t0 = time.perf_counter()
    prepared = prepare(rc.data, rc.seed, log)
    rng, train, test = prepared.rng, prepared.train, prepared.test
    timings["load"] = time.perf_counter() - t0

    cls = registry.get(rc.algo)
    data_lib.check_labels(train, cls.kind)
    data_warnings = prepared.notes + data_lib.split_warnings(train, test, cls.kind)  # why the numbers may mean nothing
    if cls.kind == "generator" and (dropped := data_lib.left_out_of_discrete(rc.data.raw)):
        data_warnings.append(f"the release leaves out {', '.join(dropped)}: declared under features: but not in the "
                             f"card's discrete: section, which is what a generator models (add them there, with "
                             f"bins of their declared bounds, to release them)")
    device = resolve_device(rc.device, cls.cuda)
    plugin = build(cls, rc.params, rc.mechanism)
    budget = Budget(rc.eps, rc.delta)
    noise = NoiseSource.for_run(rng["noise"], rc.secure)
    t1 = time.perf_counter()
    if cls.seed_batching and not rc.secure and rc.seed in seedbatch.GROUP:  # the sweep runs its seeds together
        plugin.peer_noise = {k: NoiseSource.for_run(streams(k)["noise"], False) for k in seedbatch.GROUP}
    ledger = fit_plugin(plugin, train, budget, noise, device, rc.accountant, rc.rdp_conversion)
    timings["fit"] = time.perf_counter() - t1
    if cls.kind in ("classifier", "semi_supervised") and (why := nonfinite_model(plugin, test.X)):
        raise TrainingFailed(f"algo={rc.algo}: the trained model {why}: training diverged (e.g. a step size or "
                             f"clipping bound too large), so its metrics would mean nothing")

    t2 = time.perf_counter()
    metrics = evaluate.metrics_for(plugin, train, test, rng["eval"], rc.seed)
    timings["evaluate"] = time.perf_counter() - t2
    with results.writing(artifacts):
        plugin.artifacts(artifacts)
        if cls.kind == "generator":  # the release: the sampled table, or the plugin's own (FFPDG's weighted rows)
            table_out = plugin.released_table() if hasattr(plugin, "released_table") else \
                getattr(plugin, "synthetic", None)
            if table_out is not None:
                results.write_synthetic(table_out, artifacts)
        if draw is not None:  # a tool's figures of the run, drawn from what the plugin saved (tools/plots.py)
            draw(artifacts, f"{rc.algo} on {rc.data.name}, eps={rc.eps:g}, seed {rc.seed}")
        if cls.kind == "classifier" and rc.save_predictions:
            evaluate.save_predictions(evaluate.predictions(plugin, test), artifacts)
    timings["total"] = time.perf_counter() - t0

    return {
        "algo": rc.algo,
        "data": rc.data.name,
        "eps": to_json(rc.eps),
        "delta": rc.delta,
        "seed": rc.seed,
        "metrics": {k: float(v) for k, v in metrics.items()},
        "privacy": ledger.to_dict() | {"private": cls.private, "noise": noise.kind, "delta_source": rc.delta_source},
        "guarantee": guarantee(plugin, ledger),
        "warnings": data_warnings + premise_warnings(ledger, len(train)) + plugin.warnings(),
        "timings": timings,
        "env": environment(device) | {"argv": " ".join(sys.argv[1:])} | (
            {"seeds_batched": batched} if (batched := getattr(plugin, "seeds_batched", None)) else {}),
    }
