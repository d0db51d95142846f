"""The import rule of the layout (DESIGN.md): the core a run needs (privfair_cli's top-level modules and
privfair/privacy) never imports the tools built on top of it (privfair_cli/tools: sweep, report, plots, reproduce,
regress, docs, audit); algorithms and datasets import the core only, and not the runner, its evaluation or the
CLI that call them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL_MODULES = {p.stem for p in (ROOT / "privfair_cli" / "tools").glob("*.py")} - {"__init__"}
CALLERS = {"main", "runner", "evaluate"}  # core modules an algorithm or dataset may not call back into


def imported(path: Path) -> set[str]:
    """The privfair_cli modules a file imports (`from privfair_cli import x`, `from privfair_cli.x import y`,
    `import privfair_cli.x`), at any depth of the file; a module of the tools package as `tools.<name>`."""
    out = set()

    def add(parts: list[str], names=()):
        if parts[:1] != ["privfair_cli"]:
            return
        if len(parts) == 1:
            out.update(names)
        elif parts[1] == "tools":
            out.update({f"tools.{n}" for n in names} if len(parts) == 2 else {f"tools.{parts[2]}"})
        else:
            out.add(parts[1])

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            add(node.module.split("."), [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            for a in node.names:
                add(a.name.split("."))
    return out


def tools(names: set[str]) -> set[str]:
    return {n for n in names if n.startswith("tools") or n in TOOL_MODULES}


def test_the_tools_are_a_package_of_their_own():
    assert TOOL_MODULES >= {"sweep", "report", "plots", "reproduce", "regress", "docs"}
    assert not [m for m in TOOL_MODULES if (ROOT / "privfair_cli" / f"{m}.py").exists()]


@pytest.mark.parametrize("folder", ["algorithms", "datasets"])
def test_algorithms_and_datasets_import_only_the_core(folder):
    bad = {p.name: sorted(tools(imported(p)) | (imported(p) & CALLERS)) for p in sorted((ROOT / folder).glob("*.py"))}
    assert not {k: v for k, v in bad.items() if v}, "algorithms and datasets may not import the tools"


def test_the_core_never_imports_a_tool():
    core = [p for p in (ROOT / "privfair_cli").rglob("*.py") if "tools" not in p.parts and p.name != "main.py"]
    bad = {str(p.relative_to(ROOT)): sorted(tools(imported(p))) for p in core}
    assert not {k: v for k, v in bad.items() if v}, "the core a run needs may not import the tools"


def test_the_rule_sees_every_import_form(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from privfair_cli.tools import plots\nimport privfair_cli.tools.report\n"
                 "def g():\n    from privfair_cli.evaluate import classifier\n"
                 "    from privfair_cli.tools.audit import x\n")
    assert tools(imported(f)) == {"tools.plots", "tools.report", "tools.audit"}
    assert imported(f) & CALLERS == {"evaluate"}


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
