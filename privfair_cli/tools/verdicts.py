"""The verdict of one compared cell, and the one table of closeness floors per metric kind.

A cell compares our number (mean, or median, and spread over `n` runs) with the published one. Two bounds:

- the closeness band `band = max(resolution, published std)`, with `resolution = max(floor, relative * |published|)`
  of the metric's kind (KINDS): how close our number must be to count as reproducing the published one. It never
  grows with our own spread;
- the statistical bound `bound = max(resolution, 2 c sqrt(std_pub^2 + std_ours^2) / sqrt(n))`: two standard
  errors of the difference of the two statistics (c = 1 for means, sqrt(pi / 2) for medians), never below the
  resolution (a deterministic run has no spread, and the papers print a few decimals). Where the paper's own
  numbers show that a published cell is m runs (`published_runs`, e.g. one split: every accuracy a multiple of
  1 / n_test), the published number carries its own run-to-run spread: `bound = max(resolution, 2 c sqrt(s^2 / m +
  std_ours^2 / n))` with s the published std, or ours where the paper prints none.

With `d = ours - published` and `tolerance = min(band, bound)`:

- `match`: |d| <= tolerance (close, and statistically consistent);
- `consistent`: tolerance < |d| <= bound (statistically indistinguishable only because the spread is wide; shown,
  not counted as a match);
- `deviates`: |d| > bound;
- `substitute`: our dataset stands in for one that is not public; `not_run`: no run measured the cell;
- `not_comparable`: a timing cell (wall-clock on other hardware), shown but never judged.

`docs/reproducing.md` renders KINDS (`floor_table`); tests/test_docs.py keeps the two in step.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

from privfair_cli.errors import ConfigError

VERDICTS = ("match", "consistent", "deviates", "substitute", "not_run", "not_comparable")
STATISTICS = {"mean": 1.0, "median": math.sqrt(math.pi / 2)}  # statistic -> factor c of its standard error


@dataclass(frozen=True)
class Kind:
    """A kind of published metric: its floor (absolute), relative band (a fraction of |published|), why, and the
    published metric names (fnmatch patterns) of the kind. `timing`: informational, never a verdict."""

    name: str
    floor: float
    relative: float
    why: str
    metrics: tuple[str, ...]
    timing: bool = False


KINDS = (
    Kind("accuracy", 0.01, 0.0, "accuracies and error rates in [0, 1], printed to 2-4 decimals; a point of "
         "accuracy is the smallest difference the papers discuss (a 10k-row test split has a standard error "
         "near 0.004)", ("accuracy", "acc_*", "ber", "link_prediction_accuracy", "vertex_classification_accuracy")),
    Kind("accuracy difference", 0.02, 0.0, "a difference of two accuracies carries the resolution of both",
         ("accuracy_diff_*", "accuracy_drop_*")),
    Kind("score", 0.02, 0.0, "derived scores in [0, 1] (AUC, the likelihood-ratio detection score, the "
         "accuracy-fairness score) from one model's predictions: two points", ("aucroc", "lrd", "afp")),
    Kind("fairness gap", 0.02, 0.0, "a difference of two group rates, each measured on a group of a few thousand "
         "rows to about 0.01", ("risk_difference*", "discrimination", "dp", "tprb", "tnrb", "cdp", "ctprb",
                                "ctnrb", "dsp", "deo", "dtpr", "dfpr", "rd_*", "total_effect",
                                "indirect_discrimination", "ce_o*", "IAB", "GAB", "MeanP", "MedianP", "WMeanP",
                                "WMedianP")),
    Kind("edge rate", 0.05, 0.0, "edge-recovery rates of a causal graph of 10-50 edges: one edge of a 20-edge "
         "graph is 0.05", ("TPR", "FPR", "TDR")),
    Kind("distribution distance", 0.003, 0.1, "distances between distributions (TVD, Cramér's V, the "
         "distance of the release to the data), read off figures to about 0.003; 10 % of the value where that is "
         "larger", ("tvd_1way", "tvd_2way", "acd", "dist_*")),
    Kind("percent of reference", 5.0, 0.0, "a ratio of two means in percent of the reference algorithm "
         "(PreFair's MST), or its change from it: 5 points",
         ("tvd_*_pct_of_mst", "acd_pct_of_mst", "accuracy_pct_of_mst", "dp_pct_of_mst", "tprb_pct_of_mst",
          "tnrb_pct_of_mst", "c*_pct_of_mst", "tvd_*_increase_pct", "acd_increase_pct")),
    Kind("mean difference", 0.05, 0.1, "a difference of two group means of a score (not bounded by 1): 10 % of "
         "the value, at least 0.05", ("MD", "WMD")),
    Kind("training statistic", 0.05, 0.1, "a last-epoch training loss or gradient norm: 10 % of the value, at "
         "least 0.05", ("avg_loss", "avg_grad_norm")),
    Kind("query error", 1.0, 0.1, "the mean absolute error of count queries, stated approximately in the text: "
         "10 % of the value, at least 1", ("mae",)),
    Kind("test statistic", 0.0, 0.1, "a chi-square distance grows with the table's size: 10 % of the value",
         ("chi2",)),
    Kind("prediction count", 0.0, 0.1, "counts of test points per group and prediction (about 100-200 of a "
         "2,000-point test set): 10 % of the value", ("G_*",)),
    Kind("count", 0.5, 0.0, "whole numbers (sizes, feature counts, vertices, edges, classes, the epoch or "
         "ensemble size a rule picks, iterations removed to match a budget): equal or not",
         ("size", "sample_size", "n_*", "num_*", "recommended_*", "iterations_*")),
    Kind("stopping epoch", 5.0, 0.0, "the epoch a stopping rule picks: five epochs, a twentieth of the schedule",
         ("stop_epoch",)),
    Kind("constant", 1e-4, 0.0, "a closed-form constant (a sensitivity): equal to the printed digits",
         ("sensitivity_*",)),
    Kind("runtime", 0.0, 0.0, "wall-clock time on other hardware: shown, never judged (`not_comparable`)",
         ("runtime_*",), timing=True),
)


def kind_of(metric: str) -> Kind:
    """The kind of a published metric (the first of KINDS with a matching pattern); a ConfigError names it."""
    for kind in KINDS:
        if any(fnmatch.fnmatchcase(str(metric), p) for p in kind.metrics):
            return kind
    raise ConfigError(f"published metric {metric!r} has no kind in privfair_cli.tools.verdicts.KINDS; add it to "
                      f"the kind whose floor fits it (allowed kinds: {', '.join(k.name for k in KINDS)})")


def _finite(x) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(x) else x


@dataclass(frozen=True)
class Judgement:
    verdict: str
    tolerance: float  # min(band, bound): within it, a match
    bound: float  # the statistical bound: within it (and beyond the tolerance), consistent
    deviation: float


def judge(metric: str, published: float, published_std, ours: float, ours_std, n: int, statistic: str = "mean",
          substitute: bool = False, published_runs: int | None = None) -> Judgement:
    """The verdict of a cell (module docstring). `n` = 0: not run. `published_runs`: the runs the published number
    is shown to be (None: as many as ours)."""
    kind = kind_of(metric)
    dev = float(ours) - float(published) if n else float("nan")
    resolution = max(kind.floor, kind.relative * abs(float(published)))
    band = max(resolution, _finite(published_std))
    n_ours, pub, own = max(int(n), 1), _finite(published_std), _finite(ours_std)
    if published_runs is None:
        se = math.sqrt(pub ** 2 + own ** 2) / math.sqrt(n_ours)
    else:
        se = math.sqrt((pub or own) ** 2 / published_runs + own ** 2 / n_ours)
    bound = max(resolution, 2 * STATISTICS[statistic] * se)
    tolerance = min(band, bound)
    if not n or math.isnan(dev):
        verdict = "not_run"
    elif kind.timing:
        verdict = "not_comparable"
    elif substitute:
        verdict = "substitute"
    elif abs(dev) <= tolerance:
        verdict = "match"
    elif abs(dev) <= bound:
        verdict = "consistent"
    else:
        verdict = "deviates"
    return Judgement(verdict, tolerance, bound, dev)


def floor_table() -> str:
    """KINDS as the Markdown table of docs/reproducing.md."""
    from privfair_cli.tools.tables import table

    def number(x: float) -> str:
        return f"{x:g}" if x else "-"

    rows = [[k.name, ", ".join(f"`{m}`" for m in k.metrics), "not judged" if k.timing else number(k.floor),
             "" if k.timing else (f"{k.relative:.0%}" if k.relative else "-"), k.why] for k in KINDS]
    return table(["kind", "published metrics", "floor", "relative", "why"], rows)
