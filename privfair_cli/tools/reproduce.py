"""`privfair reproduce NAME`: run a paper-table experiment and compare it cell by cell with the published numbers.

The experiment config (`configs/experiment/NAME.yaml`) holds the sweep (`hydra.sweeper.params`) and a
`reproduce:` block that maps the published table onto our runs (docs/reproducing.md). Runs land in
`results/reproduce/NAME/runs/` and are resumed (complete runs are skipped). The comparison (`comparison.csv` /
`.md`) and the figures are written once, here:

- `privfair reproduce NAME` (the full sweep, or `--update` with a subset): the complete runs of the full sweep
  found here (runs of other configs under `runs/` never enter it) are merged into the committed run record
  `results/reproduce/NAME/runs.csv.gz` (`privfair_cli.tools.records`), and the canonical comparison
  `results/reproduce/NAME/comparison.csv` is computed from that record read back, so `--no-run` re-derives it
  from the record alone, bit for bit (`derive`). A cell no recorded run measures keeps the number of the
  committed comparison with `recorded = no` (comparisons older than their record) and is `not_run`, its reason
  saying what the number would be judged (nothing re-derives it); a cell with
  neither is `not_run`;
- `privfair reproduce NAME <overrides>` (a subset, or other settings): `results/reproduce/NAME/subsets/<slug>/`,
  built from the runs of that command's sweep; the record and the canonical comparison are left as they are.

A run that fails is recorded in its folder and its cells show `not_run`; the others are compared.

Verdict of a cell (`privfair_cli.tools.verdicts`): `match`, `consistent`, `deviates`, `substitute`, `not_run`,
`not_comparable` (timing cells), from a closeness band that does not grow with our spread (the metric kind's
floor, relative band, or the published std) and the statistical bound. The statistic is the one the paper
publishes (`statistic`): for `mean` (the default) a cell is the mean and sample std of its runs; for `median` it is
the median and the robust spread `1.4826 MAD` (a consistent estimate of the std); `not_run` where no run matched
the cell, or where some of its runs have no value for the metric (a solver that did not reach an optimal status
reports NaN): such a cell is N/A with the number of failed runs and the statuses their warnings name, never a mean
over the remaining runs.

Keys of the `reproduce:` block (REQUIRED, then optional):
- `published` (a CSV under results/published), `table` (one name or a list), `datasets` ({published: card, or a
  list of cards told apart by a setting}), `metrics` ({published metric: our metric key}).
- `algorithms` ({published: ours}), `settings` ({setting key: config path}), `reasons` ({"algorithm|dataset|metric"
  glob, or "...|setting": why the cell deviates}), `substitute` (published datasets we stand in for),
  `without_cuda` (`skip`, or the overrides that fit a CPU, e.g. `["data=adult,dutch"]`), `values` ({setting key:
  {published value: our value}}),
  `metric_suffix` ({setting key: {published value: suffix of our metric key}}, e.g. `group=female` ->
  `accuracy_s0`).
- `metrics_by_dataset` ({published dataset: {published metric: our key}}): keys that replace `metrics` for one
  dataset (e.g. Compas gaps measured between Race codes 1 and 0: `dp_race`).
- `key_notes` ({glob over our keys: text}): appended to the setting of every cell whose key matches
  (e.g. `{"*_race": audit=race}`).
- `cell` (`_target_` style): how a cell's number is computed from its runs, called as
  `cell(pick, algorithm, key) -> Cell` where `pick(algorithm)` gives the runs of the cell's dataset and settings.
  Default `mean_of_runs`; `privfair_cli.tools.reproduce.ratio` ({denominator, scale, undefined, offset}) gives
  `scale * mean(algorithm) / mean(denominator) + offset` (e.g. PreFair's Greedy as % of MST);
  `privfair_cli.tools.reproduce.pipeline` picks a composable pipeline's runs by the published `<pre>+<gen>` name
  (FFPDG Tables 1-5). `privfair_cli.tools.reproduce.on_curve` ({x, level_key, level, common}) reads a number off a
  trade-off curve (a key at the x where another key reaches a level, e.g. "Dis at the same accuracy").
  `privfair_cli.tools.reproduce.drop` ({reference}) gives `reference - algorithm` seed by seed (its mean and std,
  e.g. PrivLR's accuracy drop from LR).
- `label` (default "{metric}"): the metric label of each published cell; `variants`: extra rows after each cell,
  the same cell measured on another of our keys: a list of `{keys: {our key: other key}, label: "{metric} [..]",
  reason: text}` (`{metric}` and `{key}` are filled in).
- `columns` ({column: {our metric key: text}, or `key`}): extra columns of comparison.csv / .md; `key` writes the
  metric key behind each cell.
- `title`: the heading of comparison.md; `figure`: figure kinds (`privfair_cli.tools.plots`), one mapping or a list.
- `statistic` (`mean` or `median`, default `mean`): the statistic each published cell reports over its runs (e.g.
  PreFair Fig. 8: "each cell is a median over 10 runs"); it picks the default cell function and the statistical
  bound's factor. A custom `cell` computes its own number and is only allowed with `mean`.
- `variant_of` (an experiment name): this experiment measures the same published cells as that one with another
  option (e.g. PreFair's Private-PGM estimator); the docs list it but count its cells only once, under that one.
- `published_runs` (an integer >= 1): how many runs each published cell is, where the paper's own numbers show it
  is not the number it states (e.g. one test split: every accuracy an exact multiple of 1 / n_test); the
  statistical bound then counts the published number's run-to-run spread (verdicts module docstring). Give the
  evidence in a comment beside it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from privfair_cli import results
from privfair_cli.errors import ConfigError
from privfair_cli.tools import records, tables
from privfair_cli.tools.verdicts import STATISTICS, judge

# `bound`: the statistical bound (verdicts); `runs`: our runs behind the cell; `recorded`: `yes` where the number
# comes from the run record, `no` where it is kept from an earlier comparison that has no run record
COLUMNS = ["table", "dataset", "algorithm", "setting", "metric", "published_mean", "published_std", "ours_mean",
           "ours_std", "deviation", "tolerance", "verdict", "reason", "bound", "runs", "recorded"]
KEY = "our_metric"  # the metric key behind each cell: in every comparison frame, written only when `columns` asks
RUNS = "runs"
STATED = "stated_reason"  # the reason the config gives the cell, whatever its verdict; never written
HIDDEN = [KEY, STATED]
RESULTS_ROOT = Path("results")  # outputs, relative to the working directory like every run folder
REQUIRED = ("published", "table", "datasets", "metrics")
OPTIONAL = ("algorithms", "settings", "reasons", "substitute", "without_cuda", "values", "metric_suffix",
            "metrics_by_dataset", "key_notes", "cell", "label", "variants", "columns", "title", "figure", "statistic",
            "variant_of", "published_runs")
MAD_TO_STD = 1.4826  # 1 / Phi^-1(3/4): the MAD of a normal sample times this estimates its std


def published_dir() -> Path:
    from privfair_cli.config import config_dir

    checkout = config_dir().parent / "results" / "published"
    return checkout if checkout.is_dir() else Path(__file__).resolve().parents[1] / "published"


def experiment_spec(name: str) -> dict:
    from privfair_cli.config import load_node

    spec = OmegaConf.to_container(load_node("experiment", name), resolve=False).get("reproduce")
    if not spec:
        raise ConfigError(f"experiment {name!r} has no `reproduce:` block")
    for key in REQUIRED:
        if key not in spec:
            raise ConfigError(f"experiment {name}: reproduce.{key} is missing")
    unknown = sorted(set(spec) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise ConfigError(f"experiment {name}: reproduce.{unknown[0]} is not a key of reproduce; allowed: "
                          f"{', '.join(REQUIRED + OPTIONAL)}")
    for pattern, text in (spec.get("reasons") or {}).items():  # a misindented key would land here silently
        if not isinstance(text, str) or not ("|" in str(pattern) or "*" in str(pattern)):  # else it matches nothing
            raise ConfigError(f"experiment {name}: reproduce.reasons has {pattern!r}: {type(text).__name__}; "
                              f"allowed: an 'algorithm|dataset|metric[|setting]' glob mapped to a text")
    runs = spec.get("published_runs")
    if runs is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 1):
        raise ConfigError(f"experiment {name}: reproduce.published_runs is {runs!r}; allowed: an integer >= 1")
    statistic = spec.get("statistic", "mean")
    if statistic not in STATISTICS:
        raise ConfigError(f"experiment {name}: reproduce.statistic is {statistic!r}; allowed: "
                          f"{', '.join(STATISTICS)}")
    if statistic != "mean" and spec.get("cell"):
        raise ConfigError(f"experiment {name}: reproduce.statistic={statistic} needs the default cell; a custom "
                          f"reproduce.cell computes its own number (allowed with it: statistic=mean)")
    return spec


def parse_setting(setting: str) -> dict[str, str]:
    out = {}
    for part in str(setting).split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def _same(value, wanted: str) -> bool:
    try:
        return math.isclose(float(value), float(wanted), rel_tol=1e-9, abs_tol=1e-12)
    except (TypeError, ValueError):
        return str(value) == wanted


def _reason(spec: dict, algorithm: str, dataset: str, metric: str, setting: str = "") -> str:
    """The first `reasons` entry whose pattern matches `algorithm|dataset|metric` (or, for a pattern with a fourth
    part, `algorithm|dataset|metric|published setting`, e.g. "*|MNIST|*|variant=balanced;*")."""
    for pattern, text in (spec.get("reasons") or {}).items():
        subject = f"{algorithm}|{dataset}|{metric}" + (f"|{setting}" if pattern.count("|") >= 3 else "")
        if fnmatch.fnmatch(subject, pattern):
            return text
    return ""


# ---------------------------------------------------------------------------------------------- cells
@dataclass(frozen=True)
class Cell:
    """Our number for one published cell: mean and std over `n` runs; `note` is appended to the setting and
    `reason` replaces the cell's reason (e.g. why a ratio is undefined)."""

    mean: float
    std: float
    n: int
    note: str = ""
    reason: str = ""


def run_statuses(sel: pd.DataFrame) -> str:
    """The solver statuses the runs of `sel` name in their warnings (the record's `statuses`), with counts, e.g.
    "status 'optimal_inaccurate' in 2 runs"; '' where none names one."""
    found: dict[str, int] = {}
    for text in sel["statuses"] if "statuses" in sel else []:
        for name in filter(None, str(text).split(";")) if isinstance(text, str) else []:
            found[name] = found.get(name, 0) + 1
    return "; ".join(f"status '{k}' in {v} run{'s' * (v > 1)}" for k, v in sorted(found.items()))


def unfinished(sel: pd.DataFrame, key: str) -> Cell | None:
    """A cell some of whose runs have no value for `key` (e.g. a solver that did not reach an optimal status
    reports NaN): N/A, with how many runs failed and the statuses they report, never a number over the rest."""
    if key not in sel or not sel[key].isna().any():
        return None
    failed, n = int(sel[key].isna().sum()), len(sel)
    statuses = run_statuses(sel[sel[key].isna()])
    return Cell(float("nan"), float("nan"), 0, reason=f"N/A: {failed} of {n} runs have no {key}"
                + (f" ({statuses})" if statuses else "")
                + ("; the cell is not averaged over the others" if failed < n else ""))


def mean_of_runs(pick, algorithm: str, key: str) -> Cell:
    """The default cell: mean and sample std of `key` over the runs of `algorithm`; N/A (`unfinished`) when any of
    those runs has no value for `key`."""
    sel = pick(algorithm)
    if (na := unfinished(sel, key)) is not None:
        return na
    values = sel[key].dropna() if key in sel else pd.Series(dtype=float)
    n = len(values)
    return Cell(float(values.mean()) if n else float("nan"), float(values.std(ddof=1)) if n > 1 else float("nan"),
                n)


def median_of_runs(pick, algorithm: str, key: str) -> Cell:
    """The cell of a paper that publishes medians: median of `key` over the runs of `algorithm`, with the robust
    spread `1.4826 MAD` in place of the std (it estimates the std of normal runs and ignores outlying ones)."""
    sel = pick(algorithm)
    if (na := unfinished(sel, key)) is not None:
        return na
    values = sel[key].dropna().to_numpy(dtype=float) if key in sel else np.empty(0)
    n = len(values)
    if not n:
        return Cell(float("nan"), float("nan"), 0)
    median = float(np.median(values))
    spread = MAD_TO_STD * float(np.median(np.abs(values - median))) if n > 1 else float("nan")
    return Cell(median, spread, n)


def ratio(pick, algorithm: str, key: str, denominator: str, scale: float = 100.0,
          undefined: str = "ratio undefined: both means are 0", offset: float = 0.0) -> Cell:
    """`scale * mean(algorithm) / mean(denominator) + offset` of `key` over the runs of the same dataset and
    settings (e.g. PreFair Table 3, prefair.md §9 item 6; `offset: -100` gives the change in percent, "a 7 %
    increase over MST"); `n` is the smaller of the two run counts (`runs=n` is noted in the setting), the std is
    not defined. A 0 / 0 ratio is NaN with the reason `undefined`."""
    top, bottom = pick(algorithm), pick(denominator)
    n = min(len(top), len(bottom))
    if not n or key not in top or key not in bottom:
        return Cell(float("nan"), float("nan"), n, f"runs={n}", undefined if n else "")
    with np.errstate(invalid="ignore", divide="ignore"):
        value = float(scale * np.float64(top[key].mean()) / np.float64(bottom[key].mean()) + offset)
    return Cell(value, float("nan"), n, f"runs={n}", undefined if math.isnan(value) else "")


def drop(pick, algorithm: str, key: str, reference: str) -> Cell:
    """How far `key` of `algorithm` falls below `reference`'s, seed by seed (e.g. "PrivLR's accuracy decreases
    11.42 % from LR's", pflr.md §4): the mean and sample std of `reference - algorithm` over the seeds both ran on
    the same dataset and settings (the same seed, the same split). A seed only one of them ran is left out; N/A
    (`unfinished`) where a paired run has no value for `key`."""
    top, base = pick(algorithm), pick(reference)
    if key not in top or key not in base or "seed" not in top or "seed" not in base:
        return Cell(float("nan"), float("nan"), 0)
    pairs = base[["seed", key]].merge(top[["seed", key]], on="seed", suffixes=("_reference", "_algorithm"))
    for side in ("reference", "algorithm"):
        column = f"{key}_{side}"
        if (na := unfinished(pairs.rename(columns={column: key}), key)) is not None:
            return na
    values = (pairs[f"{key}_reference"] - pairs[f"{key}_algorithm"]).to_numpy(float)
    n = len(values)
    return Cell(float(values.mean()) if n else float("nan"), float(values.std(ddof=1)) if n > 1 else float("nan"), n)


def pipeline(pick, algorithm: str, key: str, plugin: str = "ffpdg",
             combined: tuple[str, str] = ("fairmaxent", "ron_gauss"), premises: tuple[str, ...] = ()) -> Cell:
    """A cell of a composable pipeline (ffpdg.md §0): the published `<pre>+<gen>` (or `plugin`'s own name, the
    `combined` pair) selects the runs of `plugin` whose `algo.preprocessor` and `algo.generator` are pre and gen
    (the experiment's `settings` must name both paths, so the run table carries them). A published name that is
    no such pair (e.g. `ctgan`) has no runs. `premises`: metrics that must be > 0 where a run reports them (e.g.
    `pategan_labels`: a PATE-GAN run that released no label scores its untrained generator); runs failing one are
    left out, so a cell none of whose runs holds is not run (with the experiment's reason)."""
    parts = combined if algorithm == plugin else tuple(algorithm.split("+", 1))
    sel = pick(plugin)
    if len(parts) != 2:
        parts, sel = ("", ""), sel.iloc[0:0]
    for col, want in zip(("cfg.algo.preprocessor", "cfg.algo.generator"), parts, strict=True):
        sel = sel[sel[col] == want] if col in sel else sel.iloc[0:0]
    for premise in premises:
        if premise in sel:
            sel = sel[sel[premise].isna() | (sel[premise] > 0)]
    return mean_of_runs(lambda _: sel, plugin, key)


def stopping_rule(pick, algorithm: str, key: str, trainer: str = "dpsgd_es") -> Cell:
    """A cell of a stopping rule (early_stopping.md): every rule reads the same `trainer` runs, which report the
    rule's numbers as `<rule>_<key>` (one training run serves all rules)."""
    return mean_of_runs(lambda _: pick(trainer), trainer, f"{algorithm}_{key}")


def on_curve(pick, algorithm: str, key: str, x: str, level_key: str = "accuracy", level: float | None = None,
             common: list[str] | None = None) -> Cell:
    """A number read off a trade-off curve (e.g. "at the same accuracy, Semi's Dis is about 0.08"): `key` of
    `algorithm` where its curve of `level_key` against the swept run column `x` (means over the runs at each x)
    reaches `level`, linearly interpolated between the two neighbouring x that bracket it (the first crossing from
    the low end of x). `level` None: the highest `level_key` that every algorithm of `common` reaches (their common
    level; N/A when their ranges do not overlap). `n` is the fewest runs at an x of the curve; the std is not
    defined. A curve that never reaches the level, or whose runs have no value (`unfinished`), is N/A with the
    reason."""

    def curve(alg: str):
        sel = pick(alg)
        if sel.empty or x not in sel or key not in sel or level_key not in sel:
            return None, Cell(float("nan"), float("nan"), 0)
        na = unfinished(sel, key) or unfinished(sel, level_key)
        if na is not None:
            return None, na
        grouped = sel.groupby(x)
        return grouped[[level_key, key]].mean().sort_index(), int(grouped.size().min())

    own, n = curve(algorithm)
    if own is None:
        return n
    target = level
    if target is None:
        ranges = {}
        for alg in common or [algorithm]:
            other, _ = curve(alg)
            if other is None:
                return Cell(float("nan"), float("nan"), 0, reason=f"no {alg} curve to find the common {level_key}")
            ranges[alg] = (float(other[level_key].min()), float(other[level_key].max()))
        target = min(hi for _, hi in ranges.values())
        if target < max(lo for lo, _ in ranges.values()):  # no level that every curve reaches: no equal footing
            spans = ", ".join(f"{alg} {lo:.3f}-{hi:.3f}" for alg, (lo, hi) in ranges.items())
            return Cell(float("nan"), float("nan"), 0, reason=f"N/A: the curves' {level_key} ranges do not overlap "
                        f"({spans}), so there is no common {level_key} to compare at")
    lv, kv = own[level_key].to_numpy(float), own[key].to_numpy(float)
    note = f"runs={n}"  # the level is not noted: a subset reaches another one (the regression guard matches settings)
    for i in range(len(lv)):
        if math.isclose(lv[i], target, abs_tol=1e-12):
            return Cell(float(kv[i]), float("nan"), n, note)
        if i + 1 < len(lv) and min(lv[i], lv[i + 1]) < target < max(lv[i], lv[i + 1]):
            t = (target - lv[i]) / (lv[i + 1] - lv[i])
            return Cell(float(kv[i] + t * (kv[i + 1] - kv[i])), float("nan"), n, note)
    return Cell(float("nan"), float("nan"), 0, reason=f"{algorithm}'s {level_key} never reaches {target:.3f} "
                f"(range {lv.min():.3f}-{lv.max():.3f})")


def _cell_function(spec: dict):
    if spec.get("cell"):
        return _target(spec["cell"], "cell")
    return median_of_runs if spec.get("statistic", "mean") == "median" else mean_of_runs


def _target(value, key: str):
    """A `{_target_: module.function, **params}` mapping as a function of the remaining arguments."""
    from hydra.utils import instantiate

    if not isinstance(value, dict) or "_target_" not in value:
        raise ConfigError(f"reproduce.{key} must be a mapping with `_target_: module.function` (got {value!r})")
    return instantiate(value, _partial_=True, _convert_="all")


def select(runs: pd.DataFrame, spec: dict, dataset: str, setting: dict[str, str], algorithm: str) -> pd.DataFrame:
    """The runs of `algorithm` (our name) on the cards of the published `dataset` whose settings match."""
    if runs.empty:
        return runs
    cards = spec["datasets"][dataset]  # one card, or a list told apart by a setting (e.g. variant)
    sel = runs[(runs["algo"] == algorithm) & runs["data"].isin(cards if isinstance(cards, list) else [cards])]
    settings = spec.get("settings") or {}
    translate = spec.get("values") or {}  # {setting key: {published value: our value}}
    for key, value in setting.items():
        if key not in settings or value in ("inf", "∞") or sel.empty:
            continue
        value = str((translate.get(key) or {}).get(value, value))
        col = "cfg." + settings[key]
        sel = sel[[_same(v, value) for v in sel[col]]] if col in sel else sel.iloc[0:0]
    return sel


def key_of(spec: dict, dataset: str, metric: str, setting: dict[str, str]) -> str:
    """Our metric key for a published cell: `metrics_by_dataset`, else `metrics`, plus any `metric_suffix`."""
    base = ((spec.get("metrics_by_dataset") or {}).get(dataset) or {}).get(metric) or spec["metrics"][metric]
    suffixes = spec.get("metric_suffix") or {}  # {setting key: {published value: suffix of our metric key}}
    return base + "".join(str((table or {}).get(setting.get(key), "")) for key, table in suffixes.items())


def _row(spec: dict, r, label: str, key: str, cell: Cell, reason: str | None, recorded: str = "yes",
         setting: str | None = None) -> list:
    """One comparison row: the cell's verdict (verdicts.judge), its reason and setting. `recorded` says where the
    number comes from (the run record, or `no`: kept from a comparison without one, whose `setting` it keeps). A
    number no run record stands behind cannot be re-derived, so its cell is `not_run` whatever it would be judged:
    the number stays in the row and the reason says what it would be judged."""
    j = judge(r.metric, r.mean, r.std, cell.mean, cell.std, cell.n, spec.get("statistic", "mean"),
              substitute=r.dataset in set(spec.get("substitute") or []), published_runs=spec.get("published_runs"))
    # the reason the config gives this cell (a variant's own, the cell function's, else the experiment's)
    stated = cell.reason or (reason if reason is not None else _reason(spec, r.algorithm, r.dataset, r.metric,
                                                                       r.setting))
    if cell.reason:
        reason = cell.reason
    elif reason is None:  # a published cell: the experiment's reason where it does not match
        reason = stated if j.verdict != "match" else ""
    if recorded == "no" and cell.n:
        reason = f"{UNRECORDED} (on it the cell would be `{j.verdict}`)" + (f"; {reason}" if reason else "")
        j = dataclasses.replace(j, verdict="not_run")
    if setting is None:
        notes = [text for pattern, text in (spec.get("key_notes") or {}).items() if fnmatch.fnmatch(key, pattern)]
        setting = ";".join([r.setting, *notes, *([cell.note] if cell.note else [])])
    return [r.table, r.dataset, r.algorithm, setting, label, float(r.mean), r.std, cell.mean, cell.std, j.deviation,
            j.tolerance, j.verdict, reason, j.bound, cell.n, recorded if cell.n else "", key, stated]


def published_cells(published: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """The rows of a published table an experiment compares (its tables, datasets, metrics and algorithms), in the
    published order, with the published file's index."""
    tables = spec["table"] if isinstance(spec["table"], list) else [spec["table"]]
    pub = published[published["table"].isin(tables) & published["dataset"].isin(spec["datasets"])
                    & published["metric"].isin(spec["metrics"])].fillna({"setting": ""})  # text cells: no setting
    algos = spec.get("algorithms") or {}
    return pub[pub["algorithm"].isin(algos)] if algos else pub


def _tracked(pick, into: set):
    """`pick`, noting the index of every run it returns in `into` (which runs a cell reads)."""
    def tracked(algorithm: str) -> pd.DataFrame:
        sel = pick(algorithm)
        into.update(sel.index)
        return sel
    return tracked


def compare(runs: pd.DataFrame, published: pd.DataFrame, spec: dict, kept: dict[int, tuple[Cell, str]] | None = None,
            used: list[set] | None = None) -> pd.DataFrame:
    """One row per published cell of the experiment (then its `variants`), in the published order. `kept`: row
    position -> (cell, setting) of an earlier comparison, used where no run measures the row (`recorded` = no);
    `used`: filled with the index labels of the runs each row reads."""
    algos = spec.get("algorithms") or {}
    pub = published_cells(published, spec)
    cell = _cell_function(spec)
    rows: list[list] = []

    def add(r, label, key, pick, algo, reason):
        into: set = set()
        found = cell(_tracked(pick, into), algo, key)
        if used is not None:
            used.append(into)
        if not found.n and kept and len(rows) in kept:
            old, setting = kept[len(rows)]
            rows.append(_row(spec, r, label, key, old, reason, "no", setting))
        else:
            rows.append(_row(spec, r, label, key, found, reason))

    for r in pub.itertuples(index=False):
        setting = parse_setting(r.setting)
        pick = functools.partial(select, runs, spec, r.dataset, setting)
        algo = algos.get(r.algorithm, r.algorithm)
        key = key_of(spec, r.dataset, r.metric, setting)
        add(r, spec.get("label", "{metric}").format(metric=r.metric), key, pick, algo, None)
        for variant in spec.get("variants") or []:
            other = (variant.get("keys") or {}).get(key)
            if other:
                add(r, variant["label"].format(metric=r.metric, key=other), other, pick, algo,
                    variant.get("reason", ""))
    return pd.DataFrame(rows, columns=COLUMNS + HIDDEN)


def read_keys(spec: dict, published: pd.DataFrame) -> set[str]:
    """The metric names the comparison reads: each cell's key and its variants' keys, and the names the cell
    function takes (`premises`, `level_key`, `x`, ...)."""
    keys = set()
    for r in published_cells(published, spec).itertuples(index=False):
        key = key_of(spec, r.dataset, r.metric, parse_setting(r.setting))
        keys |= {key} | {(v.get("keys") or {}).get(key) for v in spec.get("variants") or []} - {None}
    for value in (spec.get("cell") or {}).values():
        keys |= {v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)}
    return keys


def _legacy(comparison: pd.DataFrame, committed: pd.DataFrame | None) -> dict[int, tuple[Cell, str]]:
    """The cells of the committed comparison that have a number the run record does not give (`recorded` = no):
    row position -> (its cell, its setting); none where the cells do not line up."""
    cells = ["table", "dataset", "algorithm", "metric"]
    if committed is None or RUNS not in committed or len(committed) != len(comparison) or \
            not committed[cells].astype(str).equals(comparison[cells].astype(str)):
        return {}
    out = {}
    for i, (new, old) in enumerate(zip(comparison.itertuples(index=False), committed.itertuples(index=False),
                                       strict=True)):
        n = 0 if pd.isna(old.runs) else int(old.runs)
        if new.verdict == "not_run" and (old.verdict != "not_run" or old.recorded == "no") and n \
                and not pd.isna(old.ours_mean):
            out[i] = (Cell(float(old.ours_mean), float(old.ours_std), n), str(old.setting))
    return out


def derive(spec: dict, record: pd.DataFrame | None, committed: pd.DataFrame | None) -> pd.DataFrame:
    """The canonical comparison: every cell the run `record` measures, from it; the other cells keep the number of
    the `committed` comparison (`recorded` = no, `not_run`) where it has one; the rest are not run."""
    runs = records.runs_view(record) if record is not None else pd.DataFrame()
    published = pd.read_csv(published_dir() / spec["published"])
    fresh = compare(runs, published, spec)
    kept = _legacy(fresh, committed)
    return compare(runs, published, spec, kept=kept) if kept else fresh


# ---------------------------------------------------------------------------------------------- runs
def collect_records(run_dirs: list[Path], spec: dict, sweep_dir: Path) -> pd.DataFrame:
    """The record rows (records.row_of) of the complete runs among `run_dirs`, with every metric."""
    commit = records.checkout_commit()
    rows = [row for d in run_dirs if (Path(d) / "metrics.json").is_file()
            and (row := records.row_of(Path(d), Path(sweep_dir), spec.get("settings") or {}, commit)) is not None]
    return records.frame(rows)


def with_folders(record: pd.DataFrame, sweep_dir: Path) -> pd.DataFrame:
    """The run table of `record` with each run's folder (`run_dir`), for the figures that read its artifacts."""
    runs = records.runs_view(record)
    return runs.assign(run_dir=[str(Path(sweep_dir) / r) for r in runs["run_id"]]) if len(runs) else runs


def sweep_run_dirs(overrides: list[str], sweep_dir: Path) -> list[Path]:
    """The run folder of every job of the sweep `overrides` (where `run_inprocess` writes it)."""
    from privfair_cli.compose import expand, job_config
    from privfair_cli.tools.sweep import run_dir_of

    return [run_dir_of(sweep_dir, job_config(job), job) for job in expand(overrides)]


def without_cuda(spec: dict, overrides: list[str]) -> list[str] | None:
    """The overrides to use on a machine without CUDA: the experiment's `without_cuda` overrides (e.g. its census
    cells only) under the user's own, or None when it declares `without_cuda: skip` (tables that take hours on a
    CPU) and the user did not name the data (`data=...`: the user chose those runs, e.g. MNIST on a CPU)."""
    import torch

    rule = spec.get("without_cuda")
    if rule is None or torch.cuda.is_available():
        return overrides
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    if rule == "skip":
        return overrides if "data" in given else None
    return [o for o in rule if o.split("=", 1)[0].lstrip("+~") not in given] + list(overrides)


def subset_dir(root: Path, overrides: list[str]) -> Path:
    """`<root>/subsets/<readable overrides>-<hash>`: one folder per distinct override list."""
    text = " ".join(overrides)
    slug = re.sub(r"[^A-Za-z0-9=,.()_+-]+", "_", text)[:80].strip("_")
    return root / "subsets" / f"{slug}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


# ---------------------------------------------------------------------------------------------- outputs
def table(comparison: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """The written comparison: COLUMNS plus the experiment's `columns`."""
    out = comparison[COLUMNS].copy()
    for column, values in (spec.get("columns") or {}).items():
        out[column] = comparison[KEY] if values == "key" else [values.get(k, "") for k in comparison[KEY]]
    return out


def write(comparison: pd.DataFrame, out: Path, title: str) -> None:
    results.atomic_write(out / "comparison.csv", comparison.to_csv(index=False, float_format="%.4f"))
    shown = comparison.round(4).astype(object).where(comparison.notna(), "")
    results.atomic_write(out / "comparison.md", f"# {title}\n\n" + tables.table(shown.columns,
                                                                               shown.itertuples(index=False)))


def draw(spec: dict, runs: pd.DataFrame, comparison: pd.DataFrame, out: Path, name: str) -> None:
    figures = spec.get("figure") or []
    for fig in figures if isinstance(figures, list) else [figures]:
        _target(fig, "figure")(runs, comparison, out, name=name)


def canonical(name: str, spec: dict, root: Path, sweep_dir: Path, scan: bool = True
              ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Merge the complete runs of the full sweep found under `sweep_dir` (when `scan`) into the committed run
    record, write it, and write the canonical comparison derived from the record read back. Returns the
    comparison and the runs found here (with all their metrics, for the figures)."""
    committed_csv = root / "comparison.csv"
    committed = pd.read_csv(committed_csv) if committed_csv.is_file() else None
    record, local = records.read(root), records.frame([])
    if scan and Path(sweep_dir).is_dir():
        dirs = sweep_run_dirs([f"experiment={name}"], sweep_dir)
        local = collect_records(dirs, spec, sweep_dir)
        if len(local):
            record = records.merge(record, local, keep={Path(d).relative_to(sweep_dir).as_posix() for d in dirs})
            full = table(derive(spec, record, committed), spec)
            record = records.prune(record, read_keys(spec, pd.read_csv(published_dir() / spec["published"])),
                                   lambda pruned: table(derive(spec, pruned, committed), spec).equals(full))
            data = records.to_bytes(record)
            record = records.from_bytes(data)  # the comparison is the record's, as `--no-run` will read it
            results.atomic_save(records.path_of(root), lambda f: f.write(data))
    comparison = derive(spec, record, committed)
    if record is not None or committed is not None:  # (nothing run, nothing committed: nothing to write)
        write(table(comparison, spec), root, spec.get("title", "{name}: ours vs published").format(name=name))
    return comparison, local


def reproduce(name: str, overrides: list[str], run: bool = True, sweep_dir: Path | None = None, jobs: int = 1,
              update_canonical: bool = False) -> pd.DataFrame | None:
    """Run (unless `run=False`) and compare; returns the comparison with `attrs` `failed` (run folders whose run
    raised) and `out` (the folder it was written to). `sweep_dir` (default `runs/`) is where the runs go; `jobs`
    runs that many side by side (`sweep.run_inprocess`). The full sweep (no overrides), or `update_canonical` with
    a subset, merges the full sweep's runs found here into the run record and re-derives the canonical comparison
    (`canonical`); a subset alone writes its own comparison under `subsets/`."""
    from privfair_cli.tools.sweep import run_inprocess

    spec = experiment_spec(name)
    root = RESULTS_ROOT / "reproduce" / name
    sweep_dir = sweep_dir or root / "runs"
    if overrides and not run:  # nothing runs, so nothing else would check them (eps=nan selects no run)
        from privfair_cli.compose import prevalidate

        bad = prevalidate([f"experiment={name}", *overrides], multirun=True)
        if bad:
            raise ConfigError(bad[0])
    effective = without_cuda(spec, overrides) if run else overrides
    if effective is None:
        print(f"skip {name}: without a CUDA device it takes hours at the paper's size; name its data to run it on "
              f"this machine (`privfair reproduce {name} data=...`)")
        return None
    failed: list[str] = []
    if run:
        if effective != overrides:
            print(f"{name}: no CUDA device, running the CPU cells only ({' '.join(effective)})")
        failed = run_inprocess([f"experiment={name}", *effective], sweep_dir, workers=jobs).failed
    title = spec.get("title", "{name}: ours vs published").format(name=name)
    published = pd.read_csv(published_dir() / spec["published"])
    out = subset_dir(root, overrides) if overrides else root
    if overrides:  # the subset's own comparison, from its runs
        record = collect_records(sweep_run_dirs([f"experiment={name}", *effective], sweep_dir), spec, sweep_dir)
        comparison = compare(records.runs_view(record), published, spec)
        write(table(comparison, spec), out, title + f" (subset: {' '.join(overrides)})")
        draw(spec, with_folders(record, sweep_dir), comparison, out, name)
        print(f"wrote {out / 'comparison.csv'}" + ("" if update_canonical else
                                                   " (a subset: the run record and the comparison of the full "
                                                   "experiment are left as they are)"))
    if not overrides or update_canonical:
        full, local = canonical(name, spec, root, sweep_dir, scan=True)
        if not overrides:
            comparison = full
            if run and len(local):  # the figures read the runs here, with all their metrics (the record keeps fewer)
                draw(spec, with_folders(local, sweep_dir), comparison, out, name)
        print(f"{root / records.FILE}: {len(local)} runs of this machine merged; {root / 'comparison.csv'} derived "
              f"from it" + ("" if not len(local) or not overrides else " (its figures are left as they are)"))
    _print(name, comparison)
    comparison.attrs["failed"] = failed  # run folders whose run raised (their cells are not_run)
    comparison.attrs["out"] = out
    return comparison


UNRECORDED = "no run record: runs made before run records existed gave this number, which cannot be re-derived"

COLOURS = {"match": "green", "consistent": "cyan", "deviates": "red", "substitute": "yellow", "not_run": "dim",
           "not_comparable": "dim"}


def counts_line(comparison: pd.DataFrame) -> str:
    """`match: 3, consistent: 1, deviates: 2, ...`: every verdict, match and consistent always shown."""
    counts = comparison["verdict"].value_counts().to_dict()
    return ", ".join(f"{v}: {counts.get(v, 0)}" for v in COLOURS if v in ("match", "consistent") or counts.get(v))


def _print(name: str, comparison: pd.DataFrame) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{name}: ours vs published")
    cols = ["dataset", "algorithm", "setting", "metric", "published", "ours", "deviation", "tolerance", "bound",
            "verdict"]
    for c in cols:
        table.add_column(c)
    for r in comparison.itertuples(index=False):
        table.add_row(r.dataset, r.algorithm, r.setting, r.metric, tables.mean_std(r.published_mean, r.published_std),
                      tables.mean_std(r.ours_mean, r.ours_std), f"{r.deviation:+.4f}", f"{r.tolerance:.4f}",
                      f"{r.bound:.4f}", f"[{COLOURS[r.verdict]}]{r.verdict}[/]")
    console = Console(width=160)
    console.print(table)
    console.print(counts_line(comparison))
