"""The import rule of the layout (DESIGN.md): algorithms and datasets use the core a run needs, never the tools
built on top of it (sweep, report, plots, reproduce, regress, docs, audit, the CLI) nor the runner that calls them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = {"sweep", "report", "plots", "reproduce", "regress", "docs", "audit", "main", "watch", "runner", "evaluate"}


def imported(path: Path) -> set[str]:
    """The privfair_cli modules a file imports (`from privfair_cli import x`, `from privfair_cli.x import y`,
    `import privfair_cli.x`), at any depth of the file."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] != "privfair_cli":
                continue
            if len(parts) == 1:
                out |= {a.name for a in node.names}
            else:
                out.add(parts[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("privfair_cli.")}
    return out


@pytest.mark.parametrize("folder", ["algorithms", "datasets"])
def test_algorithms_and_datasets_import_only_the_core(folder):
    bad = {p.name: sorted(imported(p) & TOOLS) for p in sorted((ROOT / folder).glob("*.py"))}
    assert not {k: v for k, v in bad.items() if v}, "algorithms and datasets may not import the tools"


def test_the_rule_sees_every_import_form(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from privfair_cli import plots\nimport privfair_cli.report\n"
                 "def g():\n    from privfair_cli.evaluate import classifier\n")
    assert imported(f) & TOOLS == {"plots", "report", "evaluate"}


def test_one_memo_policy_bounds_every_in_process_cache():
    """privfair_cli.memo.Memo: at most `size` entries, the oldest leaves first, a renewed entry counts as new;
    the families' module caches are Memos."""
    from privfair_cli import seedbatch
    from privfair_cli.algorithms import adv_fairness, crfs, dpne, dpsgd, fair_ssl
    from privfair_cli.memo import Memo

    m = Memo(2)
    calls = []
    assert m.get_or("a", lambda: calls.append("a") or 1) == 1 and m.get_or("a", lambda: 2) == 1 and calls == ["a"]
    m["b"] = 2
    m["a"] = 3  # renewed: now the newest
    m["c"] = 4
    assert list(m) == ["a", "c"] and m["a"] == 3
    caches = (adv_fairness._MODELS, crfs._CACHE, dpne._MEMO, dpne._M_MEMO, dpsgd._SGD_KEPT, fair_ssl._GRAPH,
              seedbatch._KEPT)
    assert all(isinstance(c, Memo) for c in caches)
