"""Progress of long work (runs of a sweep, steps of DP-SGD): a rich bar on a terminal, plain lines otherwise.

`PRIVFAIR_PROGRESS` chooses: `auto` (default: rich when stdout is a terminal, plain lines when it is not, as in CI
or a log file), `rich`, `plain` or `off`. Plain mode prints a line at most every `interval` seconds, so short work
prints nothing and a 10-minute training run a line every half minute. The worker processes of a parallel sweep
never draw a bar of their own (the sweep's bar is drawn once, by the process that launched it).

Bars opened while another is on screen share its display (one rich `Live` at a time): a DP-SGD run inside an
in-process sweep shows a second, transient bar under the sweep's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from pathlib import Path

MODES = ("auto", "rich", "plain", "off")
_live = None  # the rich Progress on screen, shared by nested bars
_checkpoint_dir: Path | None = None  # where long training checkpoints (`checkpoints`), None: nowhere


@contextlib.contextmanager
def checkpoints(path):
    """Long training inside the block (the GAN trainers, `algorithms.gan.Checkpoint`) checkpoints into the folder
    `path` every few minutes and resumes from what it finds there; the folder is removed when the block ends
    without an error (the run is complete), and kept when it raises (SIGTERM, Ctrl-C, a failure) for the next
    attempt of the same run."""
    global _checkpoint_dir
    previous, _checkpoint_dir = _checkpoint_dir, Path(path)
    try:
        yield
    finally:
        _checkpoint_dir = previous
    shutil.rmtree(path, ignore_errors=True)  # reached only when the block completed


def checkpoint_dir() -> Path | None:
    """The folder of the enclosing `checkpoints` block, None outside one."""
    return _checkpoint_dir


def mode() -> str:
    chosen = os.environ.get("PRIVFAIR_PROGRESS", "auto").lower()
    if chosen not in MODES:
        chosen = "auto"
    if chosen == "auto":
        chosen = "rich" if sys.stdout.isatty() else "plain"
    launcher = os.environ.get("PRIVFAIR_SWEEP_PID")
    if chosen == "rich" and launcher and launcher != str(os.getpid()):
        return "off"  # a sweep's worker process: the launching process draws the bar
    return chosen


def close() -> None:
    """Take any bar off the screen (an interrupted sweep never reaches the end of its bar's block)."""
    global _live
    if _live is not None:
        _live.stop()
        _live = None


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Bar:
    """`with Bar(total, "what", unit="runs") as bar: bar.advance(info=...)`; `bar.log(line)` prints a line above it."""

    def __init__(self, total: int | None, description: str, unit: str = "", interval: float = 30.0,
                 transient: bool = False, show: str | None = None):
        self.total, self.description, self.unit = total, description, unit
        self.interval, self.transient = interval, transient
        self.show = show or mode()
        self.done, self.info = 0, ""
        self._task = self._owner = None

    def __enter__(self) -> Bar:
        global _live
        self.start = self._last = time.perf_counter()
        if self.show == "rich":
            from rich import progress as rp

            if _live is None:
                _live = rp.Progress(rp.TextColumn("{task.description}"), rp.BarColumn(), rp.MofNCompleteColumn(),
                                    rp.TextColumn(self.unit), rp.TimeElapsedColumn(), rp.TextColumn("eta"),
                                    rp.TimeRemainingColumn(), rp.TextColumn("{task.fields[info]}"))
                _live.start()
                self._owner = True
            self._task = _live.add_task(self.description, total=self.total, info="")
        return self

    def advance(self, n: int = 1, info: str = "") -> None:
        self.update(self.done + n, info)

    def update(self, done: int, info: str = "") -> None:
        self.done, self.info = done, info
        if self._task is not None:
            _live.update(self._task, completed=done, info=info)
        elif self.show == "plain" and time.perf_counter() - self._last >= self.interval:
            self._plain_line()

    def log(self, line: str) -> None:
        if self.show == "off":
            return
        if self._task is not None:
            _live.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, flush=True)

    def _plain_line(self) -> None:
        self._last = now = time.perf_counter()
        elapsed = now - self.start
        of = f"/{self.total}" if self.total else ""
        eta = ""
        if self.total and 0 < self.done < self.total:
            eta = f", ~{_clock(elapsed * (self.total - self.done) / self.done)} left"
        info = f" ({self.info})" if self.info else ""
        print(f"{self.description}: {self.done}{of} {self.unit}{info}, {_clock(elapsed)} elapsed{eta}".replace(
            "  ", " "), flush=True)

    def __exit__(self, *exc) -> None:
        global _live
        if self._task is not None:
            if self.transient:
                _live.remove_task(self._task)
            if self._owner:
                _live.stop()
                _live = None
        elif self.show == "plain" and self._last != self.start:
            self._plain_line()  # a closing line for work that printed progress at all
