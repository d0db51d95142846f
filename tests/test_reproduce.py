"""The published-number comparison: cell matching, the verdict rule and its floor table, run records and the
re-derivation from them; CPU fallbacks."""

import fnmatch
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privfair_cli.errors import ConfigError
from privfair_cli.tools import records, reproduce, verdicts
from tests.conftest import needs_data

PUBLISHED = pd.DataFrame([
    ["s", "T", "Adult", "lr", "eps=inf;runs=10", "accuracy", 0.80, 0.01, ""],
    ["s", "T", "Adult", "privlr", "eps=1;runs=10", "accuracy", 0.70, 0.05, ""],
    ["s", "T", "Adult", "privlr", "eps=10;runs=10", "accuracy", 0.75, 0.02, ""],
    ["s", "T", "US", "privlr", "eps=1;runs=10", "accuracy", 0.70, 0.05, ""],
    ["s", "Other", "Adult", "lr", "eps=inf;runs=10", "accuracy", 0.1, 0.0, ""],
], columns=["source", "table", "dataset", "algorithm", "setting", "metric", "mean", "std", "notes"])

SPEC = {"table": "T", "datasets": {"Adult": "adult", "US": "adult"}, "metrics": {"accuracy": "accuracy"},
        "algorithms": {"lr": "lr", "privlr": "privlr"}, "settings": {"eps": "eps"},
        "substitute": ["US"], "reasons": {"privlr|Adult|*": "known reason"}}


def runs(algo, eps, accs):
    return pd.DataFrame({"algo": algo, "data": "adult", "eps": eps, "seed": range(len(accs)), "accuracy": accs,
                         "cfg.eps": eps})


def test_compare_matches_cells_and_applies_the_tolerance_rule():
    df = pd.concat([runs("lr", 1.0, [0.801, 0.803, 0.805, 0.807]), runs("privlr", 1, [0.5, 0.52, 0.48, 0.5])])
    out = reproduce.compare(df, PUBLISHED, SPEC).set_index(["dataset", "algorithm", "setting"])
    lr = out.loc[("Adult", "lr", "eps=inf;runs=10")]
    ours_std = pd.Series([0.801, 0.803, 0.805, 0.807]).std()
    assert lr.ours_mean == pytest.approx(0.804) and lr.runs == 4 and lr.recorded == "yes"
    assert lr.bound == pytest.approx(max(0.01, 2 * math.sqrt(0.01**2 + ours_std**2) / 2))
    assert lr.tolerance == pytest.approx(min(0.01, lr.bound))  # accuracy's floor, the published std: 0.01
    assert lr.verdict == "match" and lr.reason == ""
    bad = out.loc[("Adult", "privlr", "eps=1;runs=10")]
    assert bad.verdict == "deviates" and bad.deviation == pytest.approx(-0.2) and bad.reason == "known reason"
    assert out.loc[("Adult", "privlr", "eps=10;runs=10")].verdict == "not_run"  # no eps=10 runs
    assert out.loc[("US", "privlr", "eps=1;runs=10")].verdict == "substitute"
    assert len(out) == 4  # the other table is not compared


def test_the_band_never_grows_with_our_spread():
    """match needs closeness (the kind's floor, relative band or the published std) and statistical consistency;
    a wide spread of ours makes a far cell `consistent`, never a match (issue 45: PFLR*'s Adult RD 0.184 +- 0.203
    over 3 runs against the published 0.005)."""
    wide = verdicts.judge("risk_difference", 0.005, float("nan"), 0.184, 0.203, 3)
    assert wide.verdict == "consistent" and wide.tolerance == 0.02
    assert wide.bound == pytest.approx(2 * 0.203 / math.sqrt(3))
    assert verdicts.judge("risk_difference", 0.005, float("nan"), 0.184, 0.01, 3).verdict == "deviates"
    assert verdicts.judge("risk_difference", 0.005, float("nan"), 0.02, 0.203, 3).verdict == "match"
    # the published std widens the band: a paper's own spread
    assert verdicts.judge("accuracy", 0.80, 0.05, 0.84, 0.05, 10).verdict == "match"
    # close to the published number but statistically apart (tight runs, no published spread): within the floor
    # it matches, beyond it not
    assert verdicts.judge("accuracy", 0.80, float("nan"), 0.809, 0.0, 10).verdict == "match"
    assert verdicts.judge("accuracy", 0.80, float("nan"), 0.811, 0.0, 10).verdict == "deviates"
    # a relative band: 10 % of a chi-square distance
    assert verdicts.judge("chi2", 14482, float("nan"), 15500, float("nan"), 1).verdict == "match"
    assert verdicts.judge("chi2", 14482, float("nan"), 16500, float("nan"), 1).verdict == "deviates"
    # timing cells are shown, never judged; no run: not_run; a stand-in dataset: substitute
    assert verdicts.judge("runtime_pct_of_mst", 97.8, float("nan"), 97.8, float("nan"), 10).verdict == \
        "not_comparable"
    assert verdicts.judge("accuracy", 0.8, 0.0, float("nan"), float("nan"), 0).verdict == "not_run"
    assert verdicts.judge("accuracy", 0.8, 0.0, 0.8, 0.0, 5, substitute=True).verdict == "substitute"
    with pytest.raises(ConfigError, match="has no kind in privfair_cli.tools.verdicts.KINDS"):
        verdicts.kind_of("made_up_metric")


def test_a_published_single_draw_carries_its_own_spread():
    """`published_runs: 1` (a paper printing one split): the published number varies as much as one of our runs,
    so the bound is 2 sqrt(s^2 + std^2 / n) with s = ours where none is printed; the band, and so a match, do not
    move. Without it the published number counts as a mean of as many runs as ours."""
    mean_of_ten = verdicts.judge("accuracy", 0.75, float("nan"), 0.70, 0.03, 10)
    assert mean_of_ten.verdict == "deviates" and mean_of_ten.bound == pytest.approx(2 * 0.03 / math.sqrt(10))
    draw = verdicts.judge("accuracy", 0.75, float("nan"), 0.70, 0.03, 10, published_runs=1)
    assert draw.verdict == "consistent" and draw.bound == pytest.approx(2 * math.sqrt(0.03 ** 2 + 0.03 ** 2 / 10))
    assert draw.tolerance == mean_of_ten.tolerance == 0.01
    # a printed std is the published runs' own: over m = 4 runs, s^2 / 4
    four = verdicts.judge("accuracy", 0.75, 0.04, 0.70, 0.03, 10, published_runs=4)
    assert four.bound == pytest.approx(2 * math.sqrt(0.04 ** 2 / 4 + 0.03 ** 2 / 10))
    assert verdicts.judge("accuracy", 0.75, float("nan"), 0.60, 0.03, 10, published_runs=1).verdict == "deviates"


def test_every_compared_published_metric_has_one_kind():
    """The floors are one table per metric kind: every metric an experiment compares has exactly one kind."""
    from privfair_cli.config import group_options

    for name in group_options("experiment"):
        spec = reproduce.experiment_spec(name)
        for metric in spec["metrics"]:
            kinds = [k.name for k in verdicts.KINDS if any(fnmatch.fnmatchcase(metric, p) for p in k.metrics)]
            assert len(kinds) == 1, (name, metric, kinds)
        assert "floors" not in spec and "fast" not in spec, name


def test_without_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert reproduce.without_cuda({"without_cuda": "skip"}, []) is None
    assert reproduce.without_cuda({"without_cuda": "skip"}, ["seed=range(1)"]) is None
    # naming the data is choosing the runs: they run on the CPU
    assert reproduce.without_cuda({"without_cuda": "skip"}, ["data=mnist", "seed=range(1)"]) == \
        ["data=mnist", "seed=range(1)"]
    rule = {"without_cuda": ["data=adult,dutch", "seed=range(5)"]}
    assert reproduce.without_cuda(rule, ["seed=range(2)"]) == ["data=adult,dutch", "seed=range(2)"]
    assert reproduce.without_cuda({}, ["x=1"]) == ["x=1"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert reproduce.without_cuda({"without_cuda": "skip"}, ["x=1"]) == ["x=1"]


def test_a_reason_pattern_may_name_the_published_setting():
    spec = {"reasons": {"*|MNIST|*|variant=balanced;*": "balanced: not run", "*|MNIST|*": "unbalanced: one seed"}}
    assert reproduce._reason(spec, "sgd", "MNIST", "accuracy", "variant=balanced;eps=6.23") == "balanced: not run"
    assert reproduce._reason(spec, "sgd", "MNIST", "accuracy", "variant=unbalanced;eps=6.55") == "unbalanced: one seed"
    assert reproduce._reason(spec, "sgd", "Adult", "accuracy", "variant=balanced") == ""


def test_parse_setting():
    assert reproduce.parse_setting("eps=1;eps_f=0.5;runs=10") == {"eps": "1", "eps_f": "0.5", "runs": "10"}


# ------------------------------------------------------------------------------------------ derived cells, variants
TVD, DP = "tvd_1way_pct_of_mst", "dp_pct_of_mst"
TABLE3_PUB = pd.DataFrame([
    ["s", "T3", "adult", "greedy", "eps=1", TVD, 100.0, float("nan"), ""],
    ["s", "T3", "adult", "greedy", "eps=1", DP, 80.0, float("nan"), ""],
    ["s", "T3", "compas", "greedy", "eps=1", DP, 90.0, float("nan"), ""],
], columns=PUBLISHED.columns)
RATIO_SPEC = {
    "table": "T3", "datasets": {"adult": "adult", "compas": "compas"}, "metrics": {TVD: "tvd", DP: "dp"},
    "algorithms": {"greedy": "greedy"}, "settings": {"eps": "eps"},
    "reasons": {"*": "why"},
    "cell": {"_target_": "privfair_cli.tools.reproduce.ratio", "denominator": "mst", "scale": 100},
    "metrics_by_dataset": {"compas": {DP: "dp_race"}}, "key_notes": {"*_race": "audit=race"},
    "variants": [{"keys": {"dp_race": "dp"}, "label": "{metric} [{key}, sensitive=Sex]", "reason": "on Sex"}],
    "columns": {"our_metric": "key", "reading": {"dp": "a gap on Sex"}}}


def gen_runs(algo, data, **metrics):
    n = len(next(iter(metrics.values())))
    return pd.DataFrame({"algo": algo, "data": data, "eps": 1.0, "seed": range(n), "cfg.eps": 1.0} | metrics)


def test_ratio_cells_with_per_dataset_keys_notes_and_variants():
    runs = pd.concat([gen_runs("greedy", "adult", tvd=[0.02, 0.04], dp=[0.0, 0.0]),
                      gen_runs("mst", "adult", tvd=[0.03, 0.03], dp=[0.0, 0.0]),
                      gen_runs("greedy", "compas", dp=[0.1, 0.3], dp_race=[0.2, 0.2]),
                      gen_runs("mst", "compas", dp=[0.2, 0.2], dp_race=[0.25, 0.25])])
    out = reproduce.compare(runs, TABLE3_PUB, RATIO_SPEC)
    assert list(out["metric"]) == [TVD, DP, DP, f"{DP} [dp, sensitive=Sex]"]
    tvd, dp_adult, dp_race, dp_sex = (r for _, r in out.iterrows())
    assert tvd.ours_mean == pytest.approx(100.0) and tvd.verdict == "match" and tvd.reason == ""
    assert tvd.setting == "eps=1;runs=2" and tvd.tolerance == 5 and math.isnan(tvd.ours_std)
    assert math.isnan(dp_adult.ours_mean) and dp_adult.verdict == "not_run"  # 0 / 0: no number
    assert dp_adult.reason == "ratio undefined: both means are 0"
    assert dp_race.our_metric == "dp_race" and dp_race.ours_mean == pytest.approx(80.0, abs=1e-9)
    assert dp_race.verdict == "deviates" and dp_race.setting == "eps=1;audit=race;runs=2"  # 10 points > 5
    assert dp_race.reason == "why"
    assert dp_sex.our_metric == "dp" and dp_sex.ours_mean == pytest.approx(100.0) and dp_sex.reason == "on Sex"
    assert dp_sex.setting == "eps=1;runs=2"
    written = reproduce.table(out, RATIO_SPEC)
    assert list(written.columns) == reproduce.COLUMNS + ["our_metric", "reading"]
    assert list(written["reading"]) == ["", "a gap on Sex", "", "a gap on Sex"]


def test_cells_without_runs_are_not_run():
    out = reproduce.compare(pd.DataFrame(), TABLE3_PUB, RATIO_SPEC)
    assert set(out["verdict"]) == {"not_run"} and out["ours_mean"].isna().all()


def test_every_experiment_config_is_valid():
    """Each experiment's `reproduce:` block has only known keys, and its `cell` / `figure` targets import."""
    from privfair_cli.config import group_options

    for name in group_options("experiment"):
        spec = reproduce.experiment_spec(name)
        if spec.get("cell"):
            assert callable(reproduce._cell_function(spec))
        figures = spec.get("figure") or []
        for fig in figures if isinstance(figures, list) else [figures]:
            assert callable(reproduce._target(fig, "figure")), name
        for variant in spec.get("variants") or []:
            assert set(variant) <= {"keys", "label", "reason"}, name


def test_unknown_reproduce_key_and_old_style_figure_fail_in_one_line(tmp_path, monkeypatch):
    from privfair_cli.errors import ConfigError

    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "x.yaml").write_text(
        "reproduce: {published: p.csv, table: T, datasets: {}, metrics: {}, audit: {compas: race}}\n")
    monkeypatch.setenv("PRIVFAIR_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="reproduce.audit is not a key of reproduce"):
        reproduce.experiment_spec("x")
    (tmp_path / "experiment" / "x.yaml").write_text(  # `figure:` lost: its keys became reason patterns
        "reproduce: {published: p.csv, table: T, datasets: {}, metrics: {},\n"
        "            reasons: {'*|MNIST|*': why, file: curves.png, groups: [class2]}}\n")
    with pytest.raises(ConfigError, match="reproduce.reasons has 'file': str; allowed"):
        reproduce.experiment_spec("x")
    with pytest.raises(ConfigError, match="_target_"):
        reproduce._target("privfair_cli.algorithms.prefair:plot_fig7", "figure")


def test_subset_dir_is_readable_and_distinct(tmp_path):
    a = reproduce.subset_dir(tmp_path, ["seed=range(1)", "algo=lr,privlr", "data=german"])
    b = reproduce.subset_dir(tmp_path, ["seed=range(2)", "algo=lr,privlr", "data=german"])
    assert a.parent == tmp_path / "subsets" and a != b
    assert a.name.startswith("seed=range(1)_algo=lr,privlr_data=german-")


# ------------------------------------------------------------------------------------------ subsets (issue 11.8)
@needs_data("adult")
def test_a_subset_never_touches_the_canonical_comparison(tmp_path, monkeypatch):
    """A run with overrides writes under subsets/; the full comparison reads only the full sweep's run folders,
    so a run with another hyperparameter (algo.l2=5) never enters it, while a run of the sweep itself does."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRIVFAIR_PROGRESS", "off")
    root = tmp_path / "results" / "reproduce" / "xu2021_table8_1"
    root.mkdir(parents=True)
    (root / "comparison.csv").write_text("committed\n")
    other = reproduce.reproduce("xu2021_table8_1", ["seed=range(1)", "algo=lr", "data=adult", "algo.l2=5"])
    assert (root / "comparison.csv").read_text() == "committed\n"
    assert other.attrs["out"].parent == Path("results/reproduce/xu2021_table8_1/subsets")
    lr = other[(other.algorithm == "lr") & (other.dataset == "Adult")]
    assert (lr.verdict != "not_run").all()  # the subset compares its own run
    full = reproduce.reproduce("xu2021_table8_1", [], run=False)
    assert (full["verdict"] == "not_run").all()  # the algo.l2=5 run is not part of the experiment
    reproduce.reproduce("xu2021_table8_1", ["seed=range(1)", "algo=lr", "data=adult"])
    full = reproduce.reproduce("xu2021_table8_1", [], run=False)
    assert (full[(full.algorithm == "lr") & (full.dataset == "Adult")].verdict != "not_run").all()
    assert "table,dataset" in (root / "comparison.csv").read_text()


@needs_data
def test_the_record_is_deterministic_and_no_run_re_derives_the_comparison_from_it_alone(tmp_path, monkeypatch):
    """The full sweep's runs here are merged into runs.csv.gz and the canonical comparison is derived from it: the
    same runs give the same bytes, `--no-run` re-derives the same comparison with the run folders gone, a run
    outside the sweep (algo.l2=5) never enters, and a committed cell no recorded run measures keeps its number
    with `recorded` = no, `not_run`, its reason saying what the number would be judged."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRIVFAIR_PROGRESS", "off")
    name = "xu2021_table8_1"
    root = tmp_path / "results" / "reproduce" / name
    reproduce.reproduce(name, [], run=False, update_canonical=True)
    assert not (root / "comparison.csv").exists()  # nothing run, nothing committed: nothing written
    reproduce.reproduce(name, ["seed=range(1)", "algo=lr", "data=adult", "algo.l2=5"], update_canonical=True)
    assert not records.path_of(root).exists()  # the algo.l2=5 run is not part of the experiment

    reproduce.reproduce(name, ["seed=range(2)", "algo=lr", "data=adult"], update_canonical=True)
    committed = pd.read_csv(root / "comparison.csv")
    elsewhere = (committed.algorithm == "privlr") & (committed.dataset == "Dutch")  # "run in another session"
    committed.loc[elsewhere, ["ours_mean", "ours_std", "runs", "verdict"]] = [0.5, 0.01, 10, "match"]
    committed.to_csv(root / "comparison.csv", index=False, float_format="%.4f")
    data = records.path_of(root).read_bytes()
    assert data[4:8] == b"\0\0\0\0"  # gzip mtime 0
    rec = records.read(root)
    assert len(rec) == 2 and set(rec["device"]) == {"cpu"} and rec["machine"].str.startswith("cpu ").all()
    assert set(records.metric_columns(rec)) == {"metric.accuracy", "metric.risk_difference_abs"}  # what it reads

    reproduce.reproduce(name, [], run=False, update_canonical=True)  # the same runs: the same bytes
    assert records.path_of(root).read_bytes() == data
    after = pd.read_csv(root / "comparison.csv")
    lr = (after.algorithm == "lr") & (after.dataset == "Adult")
    assert (after[lr].recorded == "yes").all() and (after[lr].runs == 2).all()
    kept = after[elsewhere]
    assert (kept.recorded == "no").all() and (kept.ours_mean == 0.5).all()
    assert (kept.verdict == "not_run").all()  # no record re-derives it: not a reproduction, whatever the number
    assert kept.reason.str.startswith("no run record").all() and kept.reason.str.contains("would be `deviates`").all()
    assert (after[~lr & ~elsewhere].verdict == "not_run").all()

    text = (root / "comparison.csv").read_text()
    shutil.rmtree(root / "runs")  # the record alone
    reproduce.reproduce(name, [], run=False, update_canonical=True)
    assert (root / "comparison.csv").read_text() == text and records.path_of(root).read_bytes() == data


def test_records_round_trip_exactly_merge_and_prune():
    rows = [{"run_id": f"lr/adult/seed={s}-h", "config_hash": "h", "algo": "lr", "data": "adult", "eps": 1.0,
             "delta": 0.0, "seed": s, "cfg.eps": 1, "overrides": "[]", "device": "cpu", "machine": "cpu x86_64",
             "threads": 1, "seeds_batched": "", "seconds": 0.5, "commit": "c", "date": "d", "statuses": "",
             "metric.accuracy": 0.1 + 0.2 * s, "metric.other": 1 / 3} for s in (2, 0, 1)]
    rec = records.frame(rows)
    assert list(rec["seed"]) == [0, 1, 2]  # sorted by run id
    back = records.from_bytes(records.to_bytes(rec))
    assert list(back["metric.accuracy"]) == [0.1, 0.1 + 0.2, 0.1 + 0.4] and back["metric.other"][0] == 1 / 3
    assert records.to_bytes(back) == records.to_bytes(rec)
    new = records.frame([rows[0] | {"metric.accuracy": 0.9}])
    merged = records.merge(rec, new, keep={r["run_id"] for r in rows[:2]})
    assert list(merged["seed"]) == [0, 2] and merged["metric.accuracy"].tolist()[1] == 0.9  # seed 1 left the sweep
    again = records.merge(rec, records.frame([rows[0] | {"commit": "later", "date": "e"}]))  # read once more
    assert again.loc[again.seed == 2, "commit"].item() == "c" and records.to_bytes(again) == records.to_bytes(rec)
    pruned = records.prune(rec, {"accuracy"}, lambda p: True)
    assert records.metric_columns(pruned) == ["metric.accuracy"]
    assert records.prune(rec, {"accuracy"}, lambda p: False) is rec  # the comparison would change: keep all


# ------------------------------------------------------------------------------------------ figure kinds
def test_figure_kinds_write_their_files(tmp_path):
    from privfair_cli.tools import plots

    pub = PUBLISHED.iloc[:3]
    df = pd.concat([runs("lr", 1.0, [0.80, 0.81]), runs("privlr", 1.0, [0.6, 0.7]), runs("privlr", 10.0, [0.7, 0.74])])
    comparison = reproduce.compare(df, pub, SPEC)
    run_dir = tmp_path / "run" / "artifacts"
    run_dir.mkdir(parents=True)
    pd.DataFrame({"epoch": [1, 2, 1, 2], "group": ["s0", "s0", "s1", "s1"], "avg_loss": [1.0, 0.5, 1.2, 0.6],
                  "avg_grad_norm": [2.0, 1.0, 2.5, 1.5]}).to_csv(run_dir / "curves.csv", index=False)
    df["run_dir"] = str(tmp_path / "run")
    plots.ours_vs_published(df, comparison, tmp_path, name="t", file="a.png")
    plots.bars_vs_published(df, comparison, tmp_path, name="t", x="eps", metrics={"accuracy": "acc"},
                            log=["accuracy"], file="b.png")
    plots.metric_vs(df, comparison, tmp_path, name="t", x="eps", metrics=["accuracy"],
                    reference={"accuracy": {"y": 0.75, "label": "target"}}, file="c.png")
    plots.run_curves(df, comparison, tmp_path, name="t", columns={"avg_loss": "loss", "avg_grad_norm": "norm"},
                     groups=["s1"], file="d.png")
    plots.curves(pd.read_csv(run_dir / "curves.csv"), tmp_path / "e.png", title="curves")
    adj = np.array([[0, 1, 0], [1, 0, 1], [0, 0, 0]])
    plots.graph(adj, ["a", "b", "c"], tmp_path / "f.png", true=np.array([[0, 1, 1], [0, 0, 0], [0, 0, 0]]))
    for name in "abcdef":
        assert (tmp_path / f"{name}.png").stat().st_size > 5_000, name


# ------------------------------------------------------------------------------------------ the published statistic
def test_median_cells_use_the_median_and_a_robust_spread():
    """`statistic: median`: the cell is the median of its runs, its spread 1.4826 MAD (scipy's normal-scaled MAD),
    and the statistical bound widens by sqrt(pi/2), the standard error of a median relative to a mean's."""
    from scipy.stats import median_abs_deviation

    accs = [0.50, 0.52, 0.53, 0.55, 0.95]  # one outlying run: it moves the mean, not the median
    df = runs("privlr", 1, accs)
    spec = SPEC | {"statistic": "median"}
    out = reproduce.compare(df, PUBLISHED, spec).set_index(["dataset", "algorithm", "setting"])
    cell = out.loc[("Adult", "privlr", "eps=1;runs=10")]
    spread = median_abs_deviation(accs, scale="normal")
    assert cell.ours_mean == pytest.approx(np.median(accs)) and cell.ours_std == pytest.approx(spread, rel=1e-4)
    assert cell.bound == pytest.approx(
        max(0.01, 2 * math.sqrt(math.pi / 2) * math.sqrt(0.05**2 + cell.ours_std**2) / math.sqrt(5)))
    assert cell.tolerance == pytest.approx(min(0.05, cell.bound))  # the band: the published std 0.05
    mean = reproduce.compare(df, PUBLISHED, SPEC).set_index(["dataset", "algorithm", "setting"])
    assert mean.loc[("Adult", "privlr", "eps=1;runs=10")].ours_mean == pytest.approx(np.mean(accs))


@pytest.mark.parametrize("block, match", [
    ("statistic: mode", "reproduce.statistic is 'mode'; allowed: mean, median"),
    ("statistic: median, cell: {_target_: privfair_cli.tools.reproduce.ratio, denominator: mst}",
     "statistic=median needs the default cell"),
])
def test_bad_statistic_fails_in_one_line(tmp_path, monkeypatch, block, match):
    from privfair_cli.errors import ConfigError

    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "x.yaml").write_text(
        f"reproduce: {{published: p.csv, table: T, datasets: {{}}, metrics: {{}}, {block}}}\n")
    monkeypatch.setenv("PRIVFAIR_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match=match):
        reproduce.experiment_spec("x")


def test_a_cell_with_failed_runs_is_na_never_a_mean_of_the_rest(tmp_path):
    """A run whose solver did not reach an optimal status reports NaN: its cell is N/A (not_run, no number) with
    how many runs failed and the statuses their warnings name (the record's `statuses`), under the mean and the
    median statistic alike."""
    import json

    accs = [0.70, float("nan"), 0.72, float("nan")]
    rows = []
    for i, acc in enumerate(accs):
        d = tmp_path / "sweep" / f"seed={i}-abc"
        d.mkdir(parents=True)
        warn = [] if acc == acc else ["privlr: the w-step solver ended with status 'optimal_inaccurate': N/A"]
        rec = {"algo": "privlr", "data": "adult", "eps": 1.0, "delta": 0.0, "seed": i,
               "metrics": {"accuracy": None if acc != acc else acc}, "privacy": {}, "timings": {}, "env": {},
               "warnings": warn}
        (d / "metrics.json").write_text(json.dumps(rec))
        (d / "config.yaml").write_text("eps: 1.0\n")
        rows.append(records.row_of(d, tmp_path / "sweep", {"eps": "eps"}, "c"))
    df = records.runs_view(records.frame(rows))
    assert list(df["statuses"]) == ["", "optimal_inaccurate", "", "optimal_inaccurate"]
    for spec in (SPEC, SPEC | {"statistic": "median"}):
        out = reproduce.compare(df, PUBLISHED, spec).set_index(["dataset", "algorithm", "setting"])
        cell = out.loc[("Adult", "privlr", "eps=1;runs=10")]
        assert cell.verdict == "not_run" and math.isnan(cell.ours_mean) and cell.runs == 0
        assert "N/A: 2 of 4 runs have no accuracy" in cell.reason
        assert "status 'optimal_inaccurate' in 2 runs" in cell.reason
    # every run finished: the usual mean
    ok = reproduce.compare(runs("privlr", 1, [0.70, 0.72]), PUBLISHED, SPEC).set_index(
        ["dataset", "algorithm", "setting"]).loc[("Adult", "privlr", "eps=1;runs=10")]
    assert ok.ours_mean == pytest.approx(0.71) and ok.runs == 2


def test_on_curve_reads_a_key_where_the_level_is_reached_at_the_common_level():
    """`on_curve`: mean curves over runs per x; the key is interpolated linearly where the level key reaches the level;
    with no level, the highest level every `common` algorithm reaches."""
    def curve(algo, xs, accs, dis):
        return pd.DataFrame({"algo": algo, "cfg.algo.c": xs, "accuracy": accs, "discrimination": dis})

    runs_ = pd.concat([curve("semi", [0.0, 0.0, 0.1, 0.1, 0.2, 0.2], [0.60, 0.62, 0.68, 0.70, 0.74, 0.76],
                             [0.01, 0.03, 0.06, 0.08, 0.10, 0.12]),
                       curve("fs", [0.0, 0.1, 0.2], [0.62, 0.66, 0.70], [0.05, 0.09, 0.11])], ignore_index=True)
    pick = lambda algo: runs_[runs_["algo"] == algo]  # noqa: E731
    semi = reproduce.on_curve(pick, "semi", "discrimination", "cfg.algo.c", common=["semi", "fs"])
    # common level = min(max semi 0.75, max fs 0.70) = 0.70; semi's mean curve 0.61, 0.69, 0.75 -> between c 0.1 and 0.2
    assert semi.mean == pytest.approx(0.07 + (0.70 - 0.69) / (0.75 - 0.69) * (0.11 - 0.07))
    assert semi.n == 2 and semi.note == "runs=2"
    fs = reproduce.on_curve(pick, "fs", "discrimination", "cfg.algo.c", common=["semi", "fs"])
    assert fs.mean == pytest.approx(0.11) and fs.n == 1
    apart = pd.concat([runs_[runs_["algo"] == "semi"], curve("far", [0.0, 0.1], [0.80, 0.85], [0.1, 0.2])])
    split = reproduce.on_curve(lambda a: apart[apart["algo"] == a], "semi", "discrimination", "cfg.algo.c",
                               common=["semi", "far"])
    assert split.n == 0 and "ranges do not overlap (semi 0.610-0.750, far 0.800-0.850)" in split.reason
    never = reproduce.on_curve(pick, "fs", "discrimination", "cfg.algo.c", level=0.9)
    assert never.n == 0 and "never reaches 0.900" in never.reason
    broken = pd.concat([runs_, curve("semi", [0.2], [float("nan")], [float("nan")])], ignore_index=True)
    na = reproduce.on_curve(lambda a: broken[broken["algo"] == a], "semi", "discrimination", "cfg.algo.c",
                            common=["semi", "fs"])
    assert na.n == 0 and na.reason.startswith("N/A: 1 of 7 runs")
