"""The generated reproduction report (docs/reproduction.md) and the README's summary block equal what
`privfair_cli.tools.docs` makes of the committed comparisons and run records, so neither can drift from them; the
summary counts six verdicts and every published cell once."""

from pathlib import Path

import pytest

from privfair_cli.tools import docs

ROOT = Path(__file__).resolve().parent.parent
HEADER = "table,dataset,algorithm,setting,metric,published_mean,published_std,ours_mean,ours_std,deviation," \
         "tolerance,verdict,reason\n"  # (a comparison written before bound, runs and recorded existed)


def test_committed_pages_equal_the_generator_output():
    for rel, text in docs.expected(ROOT).items():
        assert (ROOT / rel).read_text() == text, f"{rel} is out of date: run `make docs`"
    assert docs.main(["--check"]) == 0


def _checkout(tmp_path: Path, comparisons: dict[str, str], gpu_only: tuple[str, ...] = ()) -> Path:
    (tmp_path / "configs" / "experiment").mkdir(parents=True)
    for name in [*comparisons, *gpu_only]:
        skip = "  without_cuda: skip\n" if name in gpu_only else ""
        (tmp_path / "configs" / "experiment" / f"{name}.yaml").write_text(
            f"# @package _global_\n# {name}: what it reproduces. More detail.\nreproduce:\n{skip}"
            f"  published: p.csv\n  table: Table 1\n  datasets: {{A: a}}\n  metrics: {{acc: accuracy}}\n")
    for name, rows in comparisons.items():
        out = tmp_path / "results" / "reproduce" / name
        out.mkdir(parents=True)
        (out / "comparison.csv").write_text(HEADER + rows)
    (tmp_path / "README.md").write_text(f"intro\n{docs.START}\nold\n{docs.END}\nrest\n"
                                        f"{docs.ALGORITHMS_START}\n{docs.ALGORITHMS_END}\n")
    return tmp_path


def test_counts_reasons_and_missing_reasons_are_shown(tmp_path):
    rows = ("Table 1,A,x,eps=1,acc,0.5,,0.5,0.01,0,0.02,match,\n"
            "Table 1,A,x,eps=2,acc,0.5,,0.9,0.01,0.4,0.02,deviates,too high\n"
            "Table 1,A,y,eps=1,acc,0.5,,,,,0.02,not_run,\n"
            "Table 2,A,y,eps=1,acc,0.5,,,,,0.02,not_run,needs a GPU\n")
    root = _checkout(tmp_path, {"p2020_table1": rows}, gpu_only=("p2020_table9",))
    assert docs.main(["--root", str(root)]) == 0
    page = (root / docs.REPORT).read_text()
    assert "| Table 1 | 3 | 1 |  | 1 |  | 1 |  |" in page and "| Table 2 | 1 |  |  |  |  | 1 |  |" in page
    assert "**deviates**, 1 cell (x; A; acc): too high" in page
    assert f"**not run**, 1 cell (y; A; acc): {docs.NO_REASON}" in page
    assert "**not run**, 1 cell (y; A; acc): needs a GPU" in page
    assert "p2020_table9: what it reproduces." in page and "More detail" not in page
    assert "`without_cuda: skip`" in page
    readme = (root / docs.README).read_text()
    assert readme.startswith("intro\n") and "\nrest\n" in readme and "old" not in readme
    assert "| other | 2 (1 without a comparison) | 1 |  | 1 |  | 2 |  | 1 experiment |" in readme
    assert "| [`p2020_table1`](#p2020_table1) | Table 1, Table 2 | 1 |  | 1 |  | 2 |  | **none** |" in page
    assert "| no comparison |" in page
    assert "**No run record yet**" in page
    assert "their cells are `not_run`, each reason saying what its number would be judged" in page
    assert docs.main(["--root", str(root), "--check"]) == 0


def test_extra_rows_of_a_published_cell_are_shown_but_counted_once(tmp_path):
    rows = ("Table 1,A,x,eps=1,acc [Race],0.5,,0.5,0.01,0,0.02,match,\n"
            "Table 1,A,x,eps=1,acc [Sex],0.5,,0.9,0.01,0.4,0.02,deviates,other attribute\n"
            "Table 1,A,x,eps=2,acc [Race],0.5,,0.9,0.01,0.4,0.02,deviates,too high\n"
            "Table 1,A,x,eps=2,acc [Sex],0.5,,0.5,0.01,0,0.02,match,\n")
    root = _checkout(tmp_path, {"p2020_table1": rows})
    spec = root / "configs" / "experiment" / "p2020_table1.yaml"
    spec.write_text(spec.read_text() + '  label: "{metric} [Race]"\n  variants:\n'
                    '    - {label: "{metric} [Sex]", keys: {accuracy: accuracy_sex}}\n')
    assert docs.main(["--root", str(root)]) == 0
    page = (root / docs.REPORT).read_text()
    assert "| Table 1 | 2 | 1 |  | 1 |  |  |  |" in page  # two published cells, not four rows
    assert "2 extra rows" in page and "1 match, 1 deviates" in page
    assert "**deviates**, 1 cell (x; A; acc [Sex]): other attribute" in page  # reasons cover every row
    assert "| other | 1 | 1 |  | 1 |  |  |  | 1 experiment |" in (root / docs.README).read_text()


def test_consistent_cells_and_a_run_record_are_shown(tmp_path):
    from privfair_cli.tools import records

    rows = ("Table 1,A,x,eps=1,acc,0.5,,0.5,0.01,0,0.02,match,,0.02,2,yes\n"
            "Table 1,A,x,eps=2,acc,0.5,,0.6,0.3,0.1,0.02,consistent,wide spread,0.3,2,yes\n"
            "Table 1,A,y,eps=1,acc,0.5,,0.9,0.01,0.4,0.02,deviates,kept,0.02,5,no\n")
    root = _checkout(tmp_path, {"p2020_table1": rows})
    csv = root / "results" / "reproduce" / "p2020_table1" / "comparison.csv"
    csv.write_text(csv.read_text().replace("reason\n", "reason,bound,runs,recorded\n", 1))
    base = {"config_hash": "h", "algo": "x", "data": "a", "eps": 1.0, "delta": 0.0, "overrides": "[]",
            "device": "cpu", "machine": "cpu x86_64", "threads": 1, "seeds_batched": "", "seconds": 1.0,
            "commit": "abc", "date": "2026-11-28T07:00Z", "statuses": "", "metric.accuracy": 0.5}
    records.write(records.frame([base | {"run_id": f"r{s}", "seed": s} for s in (0, 1)]), csv.parent)
    assert docs.main(["--root", str(root)]) == 0
    page = (root / docs.REPORT).read_text()
    assert "| Table 1 | 3 | 1 | 1 | 1 |  |  |  |" in page
    assert "**consistent**, 1 cell (x; A; acc): wide spread" in page
    assert "| 2 runs; 1 cells without |" in page
    assert "Run record: [`runs.csv.gz`]" in page and "2 runs (cpu x86_64: 2), recorded 2026-11-28, commit abc" in page
    assert "**1 cells have no run behind them in the record**" in page


def test_check_fails_when_a_comparison_changes(tmp_path, capsys):
    root = _checkout(tmp_path, {"p2020_table1": "Table 1,A,x,eps=1,acc,0.5,,0.5,0.01,0,0.02,match,\n"})
    docs.main(["--root", str(root)])
    csv = root / "results" / "reproduce" / "p2020_table1" / "comparison.csv"
    csv.write_text(csv.read_text().replace(",match,", ",deviates,"))
    assert docs.main(["--root", str(root), "--check"]) == 1
    assert "make docs" in capsys.readouterr().err


def test_readme_without_markers_and_unknown_verdicts_fail(tmp_path):
    with pytest.raises(ValueError, match="markers"):
        docs.with_block("no markers here", "x")
    root = _checkout(tmp_path, {"p2020_table1": "Table 1,A,x,eps=1,acc,0.5,,0.5,0.01,0,0.02,maybe,\n"})
    with pytest.raises(ValueError, match="unknown verdicts"):
        docs.expected(root)


def test_algorithm_table_lists_every_plugin_with_its_guarantee_and_page(tmp_path):
    from privfair_cli import registry

    page = tmp_path / docs.FAMILIES / "lr-family.md"
    page.parent.mkdir(parents=True)
    page.write_text("Module [`algorithms/logistic.py`](../../algorithms/logistic.py).\n")
    table = docs.algorithm_table(tmp_path)
    for name in registry.load_plugins():
        assert f"`{name}`" in table
    row = next(line for line in table.splitlines() if "`lr`" in line)
    assert "none: `lr`" in row and "[lr-family](docs/families/lr-family.md)" in row
    assert "[`algorithms/functional.py`](algorithms/functional.py)" in table  # no page here: the module itself


def test_every_published_cell_is_compared_or_not_comparable_with_a_reason():
    """The report accounts for all published cells: those an experiment selects, and the others, each with the
    reason it is not comparable (a description of the data, a definition, a dataset privfair lacks, the text)."""
    import pandas as pd

    from privfair_cli.tools import reproduce

    root = Path(__file__).resolve().parents[1]
    exps = docs.experiments(root)
    left = docs.not_comparable(root, exps)
    assert set(left["kind"]) <= set(docs.NOT_COMPARABLE)
    selected = set()
    for e in exps:
        pub = pd.read_csv(root / "results" / "published" / e.spec["published"])
        selected |= {(e.spec["published"], i) for i in reproduce.published_cells(pub, e.spec).index}
    assert len(selected) + len(left) == docs.published_total(root)
    assert f"Of the {docs.published_total(root):,} published cells" in (root / docs.REPORT).read_text()
    # the summary's six columns count every published cell once: the compared ones and the ones in no comparison
    counted = sum(sum(docs._counts(e.counted).values()) for e in exps)
    assert counted + len(left) == docs.published_total(root)
    assert f"**{docs.published_total(root):,}** cells |" in (root / docs.REPORT).read_text()


def test_every_cell_reason_line_names_cells_in_no_comparison():
    """Each line of the reason table gives the reason of at least one published cell in no comparison (a line whose
    cells an experiment now compares is stale), and every such cell has a reason."""
    import fnmatch

    import pandas as pd

    root = Path(__file__).resolve().parents[1]
    left = docs.not_comparable(root, docs.experiments(root))
    assert (left["reason"].str.len() > 0).all()
    folder = root / "results" / "published"
    cells = pd.concat([pd.read_csv(folder / f).assign(published=f) for f in sorted(set(left["published"]))])
    for file, table, dataset, metric, setting, text in docs.CELL_REASONS:
        hit = cells[[all(fnmatch.fnmatchcase(str(v), p) for v, p in zip(
            (r.published, r.table, r.dataset, r.metric, r.setting), (file, table, dataset, metric, setting),
            strict=True)) for r in cells.itertuples()]]
        assert len(hit), f"CELL_REASONS line matches no published cell: {text}"
        assert text in set(left["reason"]), f"no cell in no comparison has this reason (stale line): {text}"
