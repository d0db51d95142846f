"""The standing bad-input table (`tests/bad_inputs.yaml`): every row fails as promised, in one line, with no
traceback, and leaves what must survive."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from privfair_cli.main import main
from tests.conftest import require_data

ROWS = yaml.safe_load((Path(__file__).parent / "bad_inputs.yaml").read_text())


def test_table_is_well_formed():
    ids = [r["id"] for r in ROWS]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for r in ROWS:
        assert {"id", "argv", "exit", "message"} <= set(r), r
        assert set(r) <= {"id", "argv", "exit", "message", "data", "needs", "setup", "exists", "absent", "env",
                          "stream", "files", "command_env"}, r


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_bad_input(row, tmp_path, monkeypatch, capsys):
    require_data(*([row["needs"]] if isinstance(row.get("needs"), str) else row.get("needs", [])))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PRIVFAIR_PROGRESS", "off")
    for k, v in (row.get("env") or {}).items():
        monkeypatch.setenv(k, str(v))
    for argv in row.get("setup") or []:
        assert main([str(a) for a in argv]) == 0, f"setup {argv} failed: {capsys.readouterr().err}"
    capsys.readouterr()
    for path, text in (row.get("files") or {}).items():  # text, or bytes (YAML's !!binary)
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(text if isinstance(text, bytes) else text.encode())
    for k, v in (row.get("command_env") or {}).items():
        monkeypatch.setenv(k, str(v).replace("{tmp}", str(tmp_path)))
    if not row.get("data"):
        monkeypatch.setattr("privfair_cli.datasets.load", lambda *a, **k: pytest.fail("data was touched"))
    try:
        code = main([str(a) for a in row["argv"]])
    except SystemExit as stop:  # a single run that fails after validation exits from inside Hydra's job
        code = stop.code
    out, err = capsys.readouterr()
    text = out if row.get("stream") == "stdout" else err
    assert code == row["exit"], f"exit {code}, expected {row['exit']}\n{err}"
    assert "Traceback" not in err, err
    if row.get("stream") != "stdout" and code == 2:
        lines = [ln for ln in err.strip().splitlines() if ln.startswith("privfair: error")]
        assert len(lines) == 1, err
    assert row["message"] in text, text
    for pattern in row.get("exists") or []:
        assert list(tmp_path.glob(pattern)), f"{pattern} should exist"
    for pattern in row.get("absent") or []:
        assert not list(tmp_path.glob(pattern)), f"{pattern} should not exist"
