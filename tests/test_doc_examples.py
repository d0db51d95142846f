"""Every command the README and the docs show is checked, so none can go stale: each `privfair run` line composes
and validates (no data read), each `privfair reproduce NAME` names an experiment, and each shown error message is
the one the command prints today."""

from __future__ import annotations

import re
import shlex

import pytest

from privfair_cli import compose
from privfair_cli.config import config_dir, experiment_name, group_options
from privfair_cli.errors import ConfigError

ROOT = config_dir().parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PLACEHOLDER = re.compile(r"\.\.\.|<[^>]+>|\bNAME\b|\bPATH\b|\bDIR\b|path/to")


def shown_commands() -> list[tuple[str, str, str | None]]:
    """(page, command, the error line shown under it or None) for every `privfair run|reproduce` line of a fenced
    block (with or without a `$ ` prompt), placeholders and continued lines left out."""
    found = []
    for page in PAGES:
        lines, fenced = page.read_text().splitlines(), False
        for i, line in enumerate(lines):
            if line.startswith("```"):
                fenced = not fenced
                continue
            command = re.split(r"\s#\s", line.removeprefix("$ "))[0].strip()
            if not fenced or not command.startswith(("privfair run ", "privfair reproduce ")) \
                    or PLACEHOLDER.search(command) or command.endswith("\\"):
                continue
            after = lines[i + 1] if i + 1 < len(lines) else ""
            error = after.removeprefix("privfair: error: ") if after.startswith("privfair: error: ") else None
            found.append((page.relative_to(ROOT).as_posix(), command, error))
    return found


COMMANDS = shown_commands()


def test_the_docs_show_commands():
    assert len(COMMANDS) > 40 and any(error for _, _, error in COMMANDS)


@pytest.mark.parametrize("page,command,error", COMMANDS, ids=[f"{p}:{c[:60]}" for p, c, _ in COMMANDS])
def test_a_shown_command_is_valid_or_fails_as_shown(page, command, error):
    words = shlex.split(command)[1:]
    if words[0] == "reproduce":
        names = [w for w, before in zip(words[1:], words[:-1], strict=True) if not w.startswith("-") and "=" not in w
                 and before != "--jobs"]
        assert names and all(n == "all" or experiment_name(n) in group_options("experiment") for n in names), \
            f"{page}: {command}"
        return
    args = [w for w in words[1:] if w != "--debug"]
    multirun = any(a in ("-m", "--multirun") for a in args)
    overrides = [a for a in args if a not in ("-m", "--multirun") and not a.startswith("hydra")]
    if error is None:
        compose.prevalidate(overrides, multirun)
        return
    with pytest.raises(ConfigError) as raised:
        compose.prevalidate(overrides, multirun)
    shown = ".*".join(map(re.escape, re.split(r" ?\(\.\.\.\)|\.\.\.", error)))  # `...` elides
    assert re.match(shown, str(raised.value)), f"{page}: {command} now says: {raised.value}"
