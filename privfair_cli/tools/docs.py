"""`make docs` (`python -m privfair_cli.tools.docs`): the pages generated from the code and the committed comparisons.

Reads every experiment config with a `reproduce:` block (`configs/experiment/*.yaml`) and its committed comparison
(`results/reproduce/<experiment>/comparison.csv`, written by `privfair reproduce`), and the plugin registry, then

- writes `docs/reproduction.md`: per paper, experiment and table, how many cells match, are only consistent,
  deviate, are substituted, were not run or are not comparable (timing cells, and the published cells no
  experiment compares, with the reason), whether a run record stands behind the numbers (`runs.csv.gz`), with a
  link to each comparison and every non-matching cell's reason; and per algorithm family, the
  matched / deviating cells now against the recorded baseline (`results/reproduce/baseline.csv`: the counts per
  experiment and table before the comparisons were last reworked), so a change of how we measure shows its effect;
- rewrites the block of `README.md` between `START` and `END` with the summary table;
- rewrites the block of `docs/reproducing.md` between `FLOORS_START` and `FLOORS_END` with the floor table of the
  verdicts (`verdicts.floor_table`: one row per metric kind, its floor, relative band and why);
- rewrites the block between `ALGORITHMS_START` and `ALGORITHMS_END` with the algorithm table: one row per
  algorithm module (`registry.ALGORITHM_MODULES`), its task kinds, its algorithms grouped by the guarantee each
  declares, and its family page (the page under `docs/families/` that links the module), or the module itself;
- rewrites the block of `docs/privacy.md` between `GUARANTEES_START` and `GUARANTEES_END` with the guarantee
  table: per algorithm, the guarantee a run claims at its defaults and the settings that change it
  (`Plugin.guarantee_note`, plus `registry.GENERAL_GUARANTEE_RULES`).

Nothing here computes a verdict: the counts and reasons are the comparison's own, so the two pages cannot say
more (or less) than the committed comparisons. A non-matching cell whose comparison has an empty reason shows
`NO_REASON`, so the gap is visible. `--check` writes nothing and exits 1 when a page differs from what the
committed comparisons give (tests/test_docs.py runs the same check).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from privfair_cli.tools import records
from privfair_cli.tools.tables import row
from privfair_cli.tools.verdicts import VERDICTS

LABELS = {"match": "match", "consistent": "consistent", "deviates": "deviates", "substitute": "substitute",
          "not_run": "not run", "not_comparable": "not comparable"}
NO_REASON = "(no reason recorded)"
START = "<!-- reproduction-summary:start -->"
END = "<!-- reproduction-summary:end -->"
ALGORITHMS_START = "<!-- algorithms:start -->"
ALGORITHMS_END = "<!-- algorithms:end -->"
GUARANTEES_START = "<!-- guarantees:start -->"
GUARANTEES_END = "<!-- guarantees:end -->"
FLOORS_START = "<!-- floors:start -->"
FLOORS_END = "<!-- floors:end -->"
REPRODUCING = Path("docs") / "reproducing.md"
PRIVACY = Path("docs") / "privacy.md"
FAMILIES = Path("docs") / "families"
REPORT = Path("docs") / "reproduction.md"
BASELINE = Path("results") / "reproduce" / "baseline.csv"
BASELINE_NEWER = Path("results") / "reproduce" / "baseline_newer.csv"  # the nine newer families at commit 44dd9d8
README = Path("README.md")
# Experiment names are `<first author><year>_<table>` (config.EXPERIMENT_ALIASES keeps the older paper-named
# prefixes working); the prefix names the source. Unknown prefixes show as they are.
PAPERS = {
    "xu2021": "Depeng Xu, PhD thesis (2021): PFLR/PFLR* (ch. 8), PrivPC (ch. 4), DPNE (ch. 5), DPSGD-F (ch. 9)",
    "ding2020": "Ding, Zhang, Li, Wang, Yu, Pan (AAAI 2020): PDFC / ADFC",
    "pujol2023": "Pujol, Gilad, Machanavajjhala (2023): PreFair",
    "zhang2022": "Tao Zhang, PhD thesis (2022): CR-FS, fair SSL, fair sampling, adversarial fairness, early stopping",
    "xu2023": "Weijie Xu (2023): FFPDG",
}
MAX_LISTED = 6  # distinct algorithms / datasets / metrics named per reason before they are only counted


@dataclass(frozen=True)
class Experiment:
    name: str
    about: str  # the config's leading comment
    spec: dict  # its `reproduce:` block
    cells: pd.DataFrame | None  # the committed comparison; None when none is committed
    record: pd.DataFrame | None = None  # the committed run record (runs.csv.gz); None when there is none
    repeated: tuple[int, ...] = ()  # positions in `primary` of cells an earlier experiment compares (counted there)

    @property
    def paper(self) -> str:
        return self.name.split("_", 1)[0]

    @property
    def tables(self) -> list[str]:
        if self.cells is not None and len(self.cells):
            return list(dict.fromkeys(self.cells["table"]))
        table = self.spec["table"]
        return list(table) if isinstance(table, list) else [table]

    @property
    def extra(self) -> pd.Series:
        """The rows of the comparison that re-measure a published cell on another of our keys (the experiment's
        `variants`, each labelled by its template, e.g. `{metric} [Sex]`): one published number, one verdict, so
        the counts are taken over the other rows, and the extra rows are shown apart."""
        patterns = [re.escape(v["label"]).replace(re.escape("{metric}"), ".+").replace(re.escape("{key}"), ".+")
                    for v in self.spec.get("variants") or [] if v.get("label")]
        if self.cells is None or not patterns:
            return pd.Series(False, index=self.cells.index if self.cells is not None else [])
        return self.cells["metric"].str.fullmatch("|".join(f"(?:{p})" for p in patterns))

    @property
    def primary(self) -> pd.DataFrame | None:
        """The comparison's rows, one per published cell (without the `extra` rows)."""
        return None if self.cells is None else self.cells[~self.extra]

    @property
    def counted(self) -> pd.DataFrame | None:
        """The rows this experiment counts in the totals: `primary` without the cells counted under an earlier
        experiment; none for a `variant_of` experiment."""
        if self.cells is None or self.spec.get("variant_of"):
            return None
        primary = self.primary
        return primary.drop(primary.index[list(self.repeated)])


# published metrics that describe the data or a model (sizes, counts), not a result of an algorithm
DESCRIPTIONS = {"sample_size", "n_records", "n_features", "n_attributes", "n_rows", "n_records_per_group",
                "n_parameters", "num_vertices", "num_links", "num_classes"}
NOT_COMPARABLE = {
    "description": "a description of the data or a model (sizes, counts), not a result: the cards' `rows` and "
                   "expected widths, checked by the loaders, state ours",
    "definition": "a definition, not a measurement",
    "dataset": "its dataset is not one privfair has (the table's other datasets are compared)",
    "other": "a row of a compared table that no experiment selects (another algorithm or metric)",
    "text": "a number stated in the text or read off a figure, outside every table an experiment reproduces",
}
_FIG7 = "pujol2023_fig7 compares Figure 7's cells one by one"
# Why each published cell in no comparison is not comparable, where a line says more than its kind: the first
# entry whose globs (published file, table, dataset, metric, setting) match the cell gives its reason.
CELL_REASONS = (
    ("cfgan.csv", "*", "*", "fairness_threshold", "*",
     "a threshold the thesis sets (an effect within +-0.05 counts as fair), not a measurement"),
    ("fairgan.csv", "*", "*", "fairness_threshold", "*",
     "a threshold the thesis sets (a risk difference above 0.05 counts as discriminative), not a measurement"),
    ("dpsgd_f.csv", "*", "*", "equal_cost_threshold", "*",
     "the threshold tau the thesis sets for equal costs of privacy (the runs' `equal_costs` use it), not a "
     "measurement"),
    ("dpsgd_f.csv", "*", "*", "eps_spent_on_sigma1", "*",
     "an approximate statement over every dataset ('only about 0.01 budget is from sigma1'), no one dataset's "
     "number; the ledger's accounting of the counts adds 0.005-0.011 over the full T (dpsgd_f.md §2), in line "
     "with it"),
    ("dpsgd_f.csv", "*", "*", "max_group_clip_bound", "*",
     "read off a figure of an MNIST training ('close to 3'); DPSGD-F runs report it (`max_group_clip_bound`), but "
     "an MNIST training takes CPU hours and none is recorded here"),
    ("dpsgd_f.csv", "*", "*", "min_epochs_for_equal_cost", "*",
     "read off a figure of MNIST trainings over a range of epochs (approximate); such a sweep (CPU hours a "
     "training) is not recorded here"),
    ("early_stopping.csv", "*", "IMDB", "discrimination", "*",
     "restates Table 6.2's es_sc1 row at sigma = 2 (0.0694 is its equal-odds cell, which the text calls "
     "demographic parity), compared there (zhang2022_table6_2)"),
    ("fair_sampling.csv", "*", "synthetic", "n_records", "*",
     "the rows the generator draws (22,000, as datasets/synth_fes.py does) before the discriminatory data are cut "
     "from them; the runs read the cut tables (about 16,000 rows), so no run measures this stage"),
    ("ffpdg.csv", "*", "*", "eps_total", "*",
     "a setting (eps = 1, 30 % / 70 % between the mechanisms), which the xu2023 experiments use, not a result"),
    ("pdfc.csv", "Table 1", "US", "*", "*",
     "the IPUMS US census extract is not available (the table's Adult cells are compared, ding2020_table1)"),
    ("pdfc.csv", "Figure 1", "US", "*", "*",
     "read off a figure on the IPUMS US census extract, which is not available"),
    ("prefair.csv", "*", "*", "runtime_*", "*", "wall-clock time on other hardware: shown, never judged"),
    ("prefair.csv", "*", "*", "tree_total_weight", "*",
     "the weight of a tree on the toy graph of Figure 6, whose edge weights the text does not give; not a "
     "measurement on data"),
    ("prefair.csv", "*", "*", "tvd_1way_2way_increase_max_pct", "*",
     "restates Table 3 (Greedy's TVD as % of MST at eps = 1), compared cell by cell in pujol2023_table3"),
    ("prefair.csv", "*", "compas", "tvd_2way_increase_pct", "*",
     "restates Table 3 (Greedy's 2-way TVD as % of MST at eps = 1), compared in pujol2023_table3"),
    ("prefair.csv", "*", "compas", "*", "*",
     "a summary over Figure 8's budgets and classifiers (averages or bounds of its gaps); pujol2023_fig8 compares "
     "the figure's cells one by one"),
    ("prefair.csv", "*", "adult", "*", "*worst_case*",
     f"a bound over Figure 7's budgets ('worst case'); {_FIG7}"),
    ("prefair.csv", "*", "adult", "*", "*eps=all*",
     f"a bound over Figure 7's budgets and classifiers ('never exceeds'); {_FIG7}"),
    ("prefair.csv", "*", "adult", "accuracy_abs_diff_pct", "*",
     f"restates Figure 7(d) at eps = 10 (Exponential-PreFair's MLP accuracy against MST's, in points); {_FIG7}"),
)


def cell_reason(published: str, r, kind: str) -> str:
    """Why a published cell in no comparison is not comparable: its CELL_REASONS line, else its kind's."""
    import fnmatch

    for file, table, dataset, metric, setting, text in CELL_REASONS:
        values = (published, str(r.table), str(r.dataset), str(r.metric), str(r.setting))
        if all(fnmatch.fnmatchcase(v, p) for v, p in zip(values, (file, table, dataset, metric, setting),
                                                          strict=True)):
            return text
    return NOT_COMPARABLE[kind]


def not_comparable(root: Path, exps: list[Experiment]) -> pd.DataFrame:
    """The published cells no experiment compares (`reproduce.published_cells` of none), each with what it is
    (`kind`, NOT_COMPARABLE) and the reason it is `not_comparable` (its CELL_REASONS line, else its kind's)."""
    from privfair_cli.tools import reproduce

    folder = root / "results" / "published"
    covered, tables = set(), {}
    for e in exps:
        pub = pd.read_csv(folder / e.spec["published"])
        cells = reproduce.published_cells(pub, e.spec)
        covered |= {(e.spec["published"], i) for i in cells.index}
        for table in cells["table"].unique():
            tables.setdefault((e.spec["published"], table), set()).update(cells["dataset"])
    rows = []
    for path in sorted(folder.glob("*.csv")):
        for i, r in pd.read_csv(path).iterrows():
            if (path.name, i) not in covered:
                compared = tables.get((path.name, r.table))
                kind = ("description" if r.metric in DESCRIPTIONS else
                        "definition" if str(r.table).startswith("Definition") else
                        "text" if compared is None else "other" if r.dataset in compared else "dataset")
                rows.append({"published": path.name, "table": r.table, "metric": r.metric, "kind": kind,
                             "reason": cell_reason(path.name, r, kind)})
    return pd.DataFrame(rows, columns=["published", "table", "metric", "kind", "reason"])


def published_total(root: Path) -> int:
    return sum(len(pd.read_csv(p)) for p in sorted((root / "results" / "published").glob("*.csv")))


def not_comparable_section(root: Path, exps: list[Experiment]) -> list[str]:
    """The report's account of the published cells in no comparison, grouped by table and reason."""
    cells = not_comparable(root, exps)
    total = published_total(root)
    lines = ["## Published cells in no comparison (`not_comparable`)", "",
             f"Of the {total:,} published cells, {total - len(cells):,} are in a comparison above; these "
             f"{len(cells):,} are in none, and are `not_comparable` for the reason given.", ""]
    if cells.empty:
        return lines
    head = ["published", "table", "cells", "metrics", "why not comparable"]
    lines += [row(head), row(["---"] * len(head))]
    for (published, table, reason), group in cells.groupby(["published", "table", "reason"], sort=False):
        lines.append(row([published, str(table), str(len(group)), _names(group["metric"], "metrics"), reason]))
    return lines + [""]


def _about(path: Path) -> str:
    """The first sentence of the config's leading comment (what the experiment reproduces)."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if "@package" not in line:
            lines.append(line.lstrip("#").strip())
    return re.split(r"(?<=\.)\s+(?=[A-Z])", " ".join(lines), maxsplit=1)[0]


def _natural(name: str) -> list:
    """Sort key that puts table4_2 before table4_10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _experiment(root: Path, name: str) -> dict:
    """The experiment config `name` of the checkout `root`, with the shared blocks its `defaults` list names."""
    from privfair_cli.config import load_node

    return OmegaConf.to_container(load_node("experiment", name, root / "configs"), resolve=False)


def experiments(root: Path, results_root: Path | None = None) -> list[Experiment]:
    """Every experiment with a `reproduce:` block, with its comparison (under `results_root`, default the
    checkout's `results/`) if there is one."""
    out = []
    for path in sorted((root / "configs" / "experiment").glob("*.yaml"), key=lambda p: _natural(p.stem)):
        spec = _experiment(root, path.stem).get("reproduce")
        if not spec:
            continue
        folder = (results_root or root / "results") / "reproduce" / path.stem
        csv = folder / "comparison.csv"
        cells = pd.read_csv(csv, dtype=str, keep_default_na=False) if csv.is_file() else None
        out.append(Experiment(path.stem, _about(path), spec, cells, records.read(folder)))
    return _mark_repeated(root, out)


def _mark_repeated(root: Path, exps: list[Experiment]) -> list[Experiment]:
    """Each published cell is counted once: the cells of an experiment that an earlier one (not a `variant_of`)
    compares too are marked `repeated`."""
    from dataclasses import replace

    from privfair_cli.tools import reproduce

    seen: set = set()
    out = []
    for e in exps:
        if e.cells is None or e.spec.get("variant_of"):
            out.append(e)
            continue
        published = root / "results" / "published" / e.spec["published"]
        if not published.is_file():
            out.append(e)
            continue
        cells = reproduce.published_cells(pd.read_csv(published), e.spec)
        keys = [(e.spec["published"], i) for i in cells.index]
        repeated = tuple(k for k, key in enumerate(keys) if key in seen) if len(keys) == len(e.primary) else ()
        seen.update(keys)
        out.append(replace(e, repeated=repeated))
    return out


def _counts(cells: pd.DataFrame | None) -> dict[str, int]:
    if cells is None:
        return dict.fromkeys(VERDICTS, 0)
    unknown = set(cells["verdict"]) - set(VERDICTS)
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)} in a comparison; known: {', '.join(VERDICTS)}")
    return {v: int((cells["verdict"] == v).sum()) for v in VERDICTS}


def _anchor(name: str) -> str:
    return name.lower()


def _link(name: str, base: str) -> str:
    return f"{base}results/reproduce/{name}/comparison.md"


def _count_cells(counts: dict[str, int]) -> list[str]:
    return [str(counts[v]) if counts[v] else "" for v in VERDICTS]


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def record_state(e: Experiment) -> str:
    """Whether a run record stands behind the experiment's numbers: `N runs`, `N runs; k cells without`, `none`."""
    if e.cells is None:
        return ""
    without = int((e.cells.get("recorded", pd.Series(dtype=str)) == "no").sum())
    if e.record is None or e.record.empty:
        return "**none**" if without or (e.cells["verdict"] != "not_run").any() else ""
    return f"{len(e.record)} run{'s' * (len(e.record) != 1)}" + (f"; {without} cells without" if without else "")


def summary_table(exps: list[Experiment], report_link: str = "docs/reproduction.md",
                  times: dict[str, float] | None = None, unlisted: int | None = None) -> str:
    """One row per experiment: its tables, the number of cells per verdict and its run record (the report's
    summary); with `times` (`make reproduce`), a last column with each experiment's wall time; with `unlisted`, a
    row of the published cells in no comparison (`not_comparable`), so the totals count every published cell. The
    totals leave out the experiments that declare `variant_of` (the same published cells measured with another
    option)."""
    timed = times is not None
    head = ["experiment", "paper tables", *(LABELS[v] for v in VERDICTS), "run record",
            *(["wall time"] if timed else [])]
    lines = [row(head), row(["---"] * len(head))]
    total = dict.fromkeys(VERDICTS, 0)
    for e in exps:
        counts = _counts(e.primary)
        once = _counts(e.counted)  # a variant's cells, and cells an earlier experiment compares, are counted once
        for v in VERDICTS:
            total[v] += once[v]
        name = f"[`{e.name}`]({report_link}#{_anchor(e.name)})"
        tables = ", ".join(e.tables)
        verdicts = _count_cells(counts) if e.cells is not None else [""] * (len(VERDICTS) - 1) + ["no comparison"]
        lines.append(row([name, tables, *verdicts, record_state(e),
                          *([_duration(times.get(e.name))] if timed else [])]))
    if unlisted is not None:
        total["not_comparable"] += unlisted
        lines.append(row(["published cells in no comparison", "(below)", *[""] * (len(VERDICTS) - 1),
                          str(unlisted), "", *([""] if timed else [])]))
    lines.append(row(["**all**", f"{len(exps)} experiments", *(f"**{total[v]}**" for v in VERDICTS),
                      f"**{sum(total.values()):,}** cells", *([_duration(sum(times.values()))] if timed else [])]))
    return "\n".join(lines)


def _names(values: pd.Series, what: str) -> str:
    distinct = list(dict.fromkeys(values))
    if len(distinct) > MAX_LISTED:
        return f"{len(distinct)} {what}"
    return ", ".join(distinct)


def _reasons(cells: pd.DataFrame) -> list[str]:
    """One line per (verdict, reason) of the cells that do not match, with the cells it covers."""
    lines = []
    for verdict in VERDICTS[1:]:
        part = cells[cells["verdict"] == verdict]
        reasons = part["reason"].str.strip().replace("", NO_REASON)
        for reason in dict.fromkeys(reasons):
            group = part[reasons == reason]
            where = "; ".join([_names(group["algorithm"], "algorithms"), _names(group["dataset"], "datasets"),
                               _names(group["metric"], "metrics")])
            n = len(group)
            lines.append(f"- **{LABELS[verdict]}**, {n} cell{'s' * (n != 1)} ({where}): {reason}")
    return lines


def _provenance(e: Experiment) -> str:
    """What stands behind the experiment's numbers: its run record, and the cells it does not give."""
    without = int((e.cells.get("recorded", pd.Series(dtype=str)) == "no").sum())
    if e.record is None or e.record.empty:
        numbered = int((e.cells["ours_mean"].astype(str).str.strip() != "").sum())
        if not numbered:
            return "No run record: no cell has a number."
        return (f"**No run record yet** (`results/reproduce/{e.name}/{records.FILE}` is absent): the "
                + (f"{numbered} numbers" if numbered > 1 else "number") + " of this comparison come"
                + "s" * (numbered == 1) + " from runs made before run records existed and cannot be re-derived "
                "here (`recorded` = no): their cells are `not_run`, each reason saying what its number would be "
                "judged.")
    text = f"Run record: [`{records.FILE}`](../results/reproduce/{e.name}/{records.FILE}), {records.summary(e.record)}."
    if without:
        text += (f" **{without} cells have no run behind them in the record** (`recorded` = no): their numbers come "
                 "from an earlier comparison and cannot be re-derived here, so they are `not_run`.")
    return text


def _experiment_section(e: Experiment) -> list[str]:
    lines = [f"### {e.name}", "", e.about, ""]
    if e.cells is None:
        skip = e.spec.get("without_cuda") == "skip"
        lines += [f"**Not run**: no comparison is committed (`results/reproduce/{e.name}/comparison.csv` is absent)"
                  + ("; the experiment declares `without_cuda: skip`, so `make reproduce` skips it on a machine "
                     "without a CUDA device." if skip else "."), ""]
        return lines
    lines += [f"Comparison: [comparison.md]({_link(e.name, '../')}) "
              f"([csv](../results/reproduce/{e.name}/comparison.csv)).", "", _provenance(e), ""]
    head = ["table", "cells", *(LABELS[v] for v in VERDICTS)]
    lines += [row(head), row(["---"] * len(head))]
    for table in e.tables:
        part = e.primary[e.primary["table"] == table]
        lines.append(row([table, str(len(part)), *_count_cells(_counts(part))]))
    extra = e.cells[e.extra]
    if len(extra):
        counts = _counts(extra)
        lines += ["", f"Not counted above: {len(extra)} extra rows measure the same published cells on another of "
                  "our keys (the experiment's `variants`): " + ", ".join(
                      f"{counts[v]} {LABELS[v]}" for v in VERDICTS if counts[v]) + "."]
    reasons = _reasons(e.cells)
    lines += ["", *(reasons or ["Every cell matches." if len(e.cells) else "No published cell to compare."]), ""]
    return lines


def experiment_families(root: Path, exps: list[Experiment]) -> dict[str, str]:
    """Experiment -> its family (the family page's name): the page of the last algorithm of the experiment's sweep
    (`hydra.sweeper.params.algo`; the paper's own method comes after its baselines) that has one; for a sweep of
    algorithms without one (e.g. `describe`, the papers' data sizes), the family of the other experiments of the
    same published file (the one most of them have); else `other`."""
    from collections import Counter

    from privfair_cli import registry

    plugins = registry.load_plugins()
    pages = family_pages(root)
    out = {}
    for e in exps:
        params = _experiment(root, e.name).get("hydra", {}).get("sweeper", {}).get("params", {})
        algos = [a.strip() for a in str(params.get("algo", "")).split(",") if a.strip()]
        found = [pages[m] for m in (plugins[a].__module__.rsplit(".", 1)[-1] for a in algos if a in plugins)
                 if m in pages]
        out[e.name] = Path(found[-1]).stem if found else "other"
    by_file: dict[str, Counter] = {}
    for e in exps:
        if out[e.name] != "other":
            by_file.setdefault(e.spec["published"], Counter())[out[e.name]] += 1
    for e in exps:
        if out[e.name] == "other" and by_file.get(e.spec["published"]):
            out[e.name] = by_file[e.spec["published"]].most_common(1)[0][0]
    return out


def family_table(root: Path, exps: list[Experiment]) -> str:
    """Per family: matched and deviating cells in the baseline and now, and the share of compared cells (match +
    deviates) that match. Experiments without a baseline row count 0 before."""
    csv = root / BASELINE
    base = pd.read_csv(csv) if csv.is_file() else pd.DataFrame(columns=["experiment", *VERDICTS])
    before = base.groupby("experiment")[["match", "deviates"]].sum()
    families = experiment_families(root, exps)
    rows: dict[str, list[int]] = {}
    variants: dict[str, list[int]] = {}
    for e in exps:
        now = _counts(e.primary if e.spec.get("variant_of") else e.counted)
        if e.spec.get("variant_of"):  # the same published cells as another experiment: counted there, shown apart
            acc = variants.setdefault(families[e.name], [0, 0, 0])
            acc[0] += now["match"]
            acc[1] += now["consistent"]
            acc[2] += now["deviates"]
            continue
        old = before.loc[e.name] if e.name in before.index else dict.fromkeys(VERDICTS, 0)
        acc = rows.setdefault(families[e.name], [0, 0, 0, 0, 0])
        for k, v in enumerate([old["match"], old["deviates"], now["match"], now["consistent"], now["deviates"]]):
            acc[k] += int(v)

    def share(m: int, d: int) -> str:
        return f"{100 * m / (m + d):.0f}%" if m + d else ""

    head = ["family", "match before", "deviates before", "matched before", "match now", "consistent now",
            "deviates now", "matched now", "variants: match / consistent / deviates"]
    lines = [row(head), row(["---"] * len(head))]
    total = [0, 0, 0, 0, 0]
    for family in sorted(rows):
        mb, db, mn, cn, dn = rows[family]
        total = [t + v for t, v in zip(total, rows[family], strict=True)]
        link = f"[{family}](families/{family}.md)" if family != "other" else family
        var = variants.get(family)
        lines.append(row([link, str(mb), str(db), share(mb, db), str(mn), str(cn), str(dn), share(mn, cn + dn),
                          " / ".join(map(str, var)) if var else ""]))
    mb, db, mn, cn, dn = total
    lines.append(row(["**all**", f"**{mb}**", f"**{db}**", share(mb, db), f"**{mn}**", f"**{cn}**", f"**{dn}**",
                      share(mn, cn + dn), ""]))
    return "\n".join(lines)


def newer_family_table(root: Path, exps: list[Experiment]) -> str:
    """The nine families of the second fidelity pass: their cells per verdict at its start (BASELINE_NEWER, one
    row per experiment as it was named then, counted under the verdict rules of the time) and now; `compared` =
    match + consistent + deviates, `reached` = compared / (compared + substitute + not_run), `matched` = match /
    compared."""
    base = pd.read_csv(root / BASELINE_NEWER).groupby("family")[list(VERDICTS[:5])].sum()
    families = experiment_families(root, exps)
    now = pd.DataFrame(0, index=base.index, columns=list(VERDICTS[:5]))
    for e in exps:
        if families[e.name] in now.index and not e.spec.get("variant_of"):
            now.loc[families[e.name]] += pd.Series(_counts(e.counted))[list(VERDICTS[:5])]

    def cells(c: pd.Series) -> list[str]:
        compared = int(c["match"] + c["consistent"] + c["deviates"])
        reachable = compared + int(c["substitute"] + c["not_run"])
        return [f"{int(c['match'])} / {compared}", f"{100 * c['match'] / compared:.0f}%" if compared else "",
                f"{int(c['substitute'] + c['not_run'])}", f"{100 * compared / reachable:.0f}%" if reachable else ""]

    head = ["family", "match / compared before", "matched before", "not run or substitute before", "reached before",
            "match / compared now", "matched now", "not run or substitute now", "reached now"]
    lines = [row(head), row(["---"] * len(head))]
    for family in [*base.index, "**all**"]:
        b, n = (base.sum(), now.sum()) if family == "**all**" else (base.loc[family], now.loc[family])
        link = f"[{family}](families/{family}.md)" if family != "**all**" else family
        lines.append(row([link, *cells(b), *cells(n)]))
    return "\n".join(lines)


def report(exps: list[Experiment], root: Path | None = None) -> str:
    """The text of docs/reproduction.md."""
    lines = [
        "# Reproduction report",
        "",
        "<!-- Generated by `make docs` (python -m privfair_cli.tools.docs) from results/reproduce/*/comparison.csv; "
        "do not edit. -->",
        "",
        "Every paper table privfair reproduces, counted cell by cell from the committed comparisons "
        "(`results/reproduce/<experiment>/comparison.csv`, written by `privfair reproduce`). How a cell is compared "
        "and what each verdict means: [reproducing.md](reproducing.md). Each experiment below links its comparison "
        "(published and reproduced mean ± std, deviation, tolerance per cell) and lists the reason recorded for every "
        "cell that does not match; a cell without one shows " + NO_REASON + ". Each published number is counted "
        "once: where a comparison adds extra rows that measure the same cell on another of our keys (its "
        "`variants`, e.g. PreFair's Compas gaps on Sex besides Race), those rows are shown and given reasons but "
        "not counted.",
        "",
        "## Summary",
        "",
        summary_table(exps, report_link="", unlisted=len(not_comparable(root, exps)) if root is not None and
                      (root / "results" / "published").is_dir() else None),
        "",
    ]
    if root is not None and (root / "results" / "published").is_dir():
        lines += not_comparable_section(root, exps)
    if root is not None and (root / BASELINE).is_file():
        lines += [
            "## Per family: before and after",
            "",
            "Matched and deviating cells per algorithm family in the recorded baseline "
            "(`results/reproduce/baseline.csv`, the counts before the comparisons compared like with like: "
            "published medians as medians, the papers' estimators as options, the evaluation classifiers checked) "
            "and in the committed comparisons now, both counting each published cell once (the baseline's rows of "
            "Tables 4.3-4.6 are the stand-in generator's, the comparisons counted for those cells before TETRAD's "
            "generator); `matched` is the share of compared cells (match + deviates) "
            "that match. The last column counts the experiments that re-measure a family's cells with another "
            "option (`variant_of`: PreFair with Private-PGM or its reference code's search, Tables 4.3-4.6 with the "
            "spec's stand-in generator instead of TETRAD's, the MNIST tables with momentum 0.5), which the other "
            "columns leave out.",
            "",
            family_table(root, exps),
            "",
        ]
    if root is not None and (root / BASELINE_NEWER).is_file():
        lines += [
            "## The nine newer families: second fidelity pass",
            "",
            "Cells per verdict of the nine families added last (issue 48) at the start of their fidelity pass "
            "(`results/reproduce/baseline_newer.csv`: the committed comparisons of commit 44dd9d8, under the "
            "verdict rules of the time, which let a number without a run record count) and now, under the strict "
            "rules (a cell no run record stands behind is `not_run`). `compared` counts match + consistent + "
            "deviates; `reached` is the share of a family's reachable cells (compared, substitute, not_run) that "
            "are compared; `matched` the share of compared cells that match. The pass' goal: reached >= 95 %, "
            "matched >= 55 %.",
            "",
            newer_family_table(root, exps),
            "",
        ]
    for paper in dict.fromkeys(e.paper for e in exps):
        lines += [f"## {PAPERS.get(paper, paper)}", ""]
        for e in exps:
            if e.paper == paper:
                lines += _experiment_section(e)
    return "\n".join(lines).rstrip() + "\n"


def family_summary(root: Path, exps: list[Experiment], report_link: str = "docs/reproduction.md") -> str:
    """The README's summary: per family, its experiments and the number of cells per verdict (the per-experiment
    table is in the report). Variant experiments (`variant_of`) are counted with their experiments but not in the
    cells, which their main experiment already counts."""
    families = experiment_families(root, exps)
    head = ["family", "experiments", *(LABELS[v] for v in VERDICTS), "without a run record"]
    lines = [row(head), row(["---"] * len(head))]
    total = dict.fromkeys(VERDICTS, 0)
    bare = 0
    for family in sorted(set(families.values())):
        mine = [e for e in exps if families[e.name] == family]
        counts = dict.fromkeys(VERDICTS, 0)
        for e in mine:
            counts = {v: counts[v] + n for v, n in _counts(e.counted).items()}
        total = {v: total[v] + counts[v] for v in VERDICTS}
        missing = sum(e.cells is None for e in mine)
        unrecorded = sum(record_state(e) == "**none**" for e in mine)
        bare += unrecorded
        n = f"{len(mine)}" + (f" ({missing} without a comparison)" if missing else "")
        link = f"[{family}](docs/families/{family}.md)" if family != "other" else family
        bare_text = f"{unrecorded} experiment{'s' * (unrecorded != 1)}" if unrecorded else ""
        lines.append(row([link, n, *_count_cells(counts), bare_text]))
    unlisted = len(not_comparable(root, exps)) if (root / "results" / "published").is_dir() else 0
    if unlisted:
        total["not_comparable"] += unlisted
        lines.append(row(["published cells in no comparison", "", *[""] * (len(VERDICTS) - 1), str(unlisted), ""]))
    lines.append(row(["**all**", f"[{len(exps)}]({report_link})", *(f"**{total[v]}**" for v in VERDICTS),
                      f"**{bare}** experiments"]))
    return "\n".join(lines)


def readme_block(root: Path, exps: list[Experiment]) -> str:
    return f"{START}\n{family_summary(root, exps)}\n{END}"


def with_block(text: str, block: str, start_marker: str = START, end_marker: str = END) -> str:
    """`text` with the part from `start_marker` to `end_marker` (markers included) replaced by `block`."""
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < start:
        raise ValueError(f"README.md needs the markers {start_marker} and {end_marker} (in this order)")
    return text[:start] + block + text[end + len(end_marker):]


def family_pages(root: Path) -> dict[str, str]:
    """Algorithm module -> the family page (path from the checkout) that links `algorithms/<module>.py`."""
    pages = {}
    for page in sorted((root / FAMILIES).glob("*.md")):
        for module in re.findall(r"\(\.\./\.\./algorithms/(\w+)\.py\)", page.read_text()):
            pages.setdefault(module, (FAMILIES / page.name).as_posix())
    return pages


def _summary(doc: str | None) -> str:
    """What a module is: the first sentence of its docstring, up to its first parenthesis."""
    first = re.split(r"(?<=\.)\s", " ".join((doc or "").split("\n\n")[0].split()), maxsplit=1)[0]
    return first.split(" (")[0].rstrip(".")


def algorithm_table(root: Path) -> str:
    """One row per algorithm module: what it is, task kinds, algorithms by declared guarantee, documentation."""
    import importlib

    from privfair_cli import registry

    plugins = registry.load_plugins()
    head = ["family", "task", "algorithms by guarantee", "documentation"]
    lines = [row(head), row(["---"] * len(head))]
    pages = family_pages(root)
    for module in registry.ALGORITHM_MODULES:
        classes = [c for _, c in sorted(plugins.items()) if c.__module__.rsplit(".", 1)[-1] == module]
        if not classes:
            continue
        by_guarantee = {g: [f"`{c.name}`" for c in classes if (c.guarantee if c.private else "none") == g]
                        for g in registry.GUARANTEES}
        guarantees = "; ".join(f"{g}: {', '.join(names)}" for g, names in by_guarantee.items() if names)
        kinds = ", ".join(dict.fromkeys(c.kind for c in classes))
        doc = _summary(importlib.import_module(f"privfair_cli.algorithms.{module}").__doc__)
        page = pages.get(module)
        link = f"[{Path(page).stem}]({page})" if page else f"[`algorithms/{module}.py`](algorithms/{module}.py)"
        lines.append(row([doc, kinds, guarantees, link]))
    return f"{ALGORITHMS_START}\n" + "\n".join(lines) + f"\n{ALGORITHMS_END}"


def guarantee_rows() -> list[tuple[str, str, str]]:
    """(algorithm, guarantee at its defaults, the settings that change it) for every registered algorithm."""
    from privfair_cli import registry

    plugins = registry.load_plugins()
    return [(name, registry.guarantee_at_defaults(cls), cls.guarantee_note if cls.private else "non-private")
            for name, cls in sorted(plugins.items())]


def guarantee_table() -> str:
    """The guarantee table of docs/privacy.md (and of `privfair list`), from the registry."""
    from privfair_cli import registry

    head = ["algorithm", "guarantee at its defaults", "settings that change it"]
    lines = [row(head), row(["---"] * len(head))]
    lines += [row([f"`{name}`", f"`{claim}`", note or "-"]) for name, claim, note in guarantee_rows()]
    rules = "\n".join(f"- {rule}" for rule in registry.GENERAL_GUARANTEE_RULES)
    return (f"{GUARANTEES_START}\nFor every private algorithm:\n\n{rules}\n\n" + "\n".join(lines)
            + f"\n{GUARANTEES_END}")


def expected(root: Path) -> dict[Path, str]:
    """What the generated files must contain, from the committed comparisons and the registry under `root`."""
    exps = experiments(root)
    readme = with_block((root / README).read_text(), readme_block(root, exps))
    readme = with_block(readme, algorithm_table(root), ALGORITHMS_START, ALGORITHMS_END)
    pages = {REPORT: report(exps, root), README: readme}
    if (root / REPRODUCING).is_file():  # the floor table of the verdicts, from the code
        from privfair_cli.tools.verdicts import floor_table

        pages[REPRODUCING] = with_block((root / REPRODUCING).read_text(),
                                        f"{FLOORS_START}\n{floor_table()}{FLOORS_END}", FLOORS_START, FLOORS_END)
    if (root / PRIVACY).is_file():  # (a checkout without the privacy page has no table to keep)
        pages[PRIVACY] = with_block((root / PRIVACY).read_text(), guarantee_table(), GUARANTEES_START, GUARANTEES_END)
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m privfair_cli.tools.docs", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2],
                        help="the checkout (default: the one this module lives in)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    stale = []
    for rel, text in expected(args.root).items():
        path = args.root / rel
        if path.is_file() and path.read_text() == text:
            continue
        stale.append(str(rel))
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)} (run `make docs`)", file=sys.stderr)
        return 1
    print(f"wrote {', '.join(stale)}" if stale else "up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
