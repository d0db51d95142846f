"""The one in-process cache policy of privfair (what the families keep between the runs of one process).

A `Memo` is a dict bounded to `size` entries, oldest dropped first, whose keys hold every input the cached value
depends on (data digests, settings, random-stream states: what a family's key function builds); the code that
computes a value does not change within a process, so the key needs no code version. Only noise-free work is
kept (a reference model, a walk matrix, a similarity graph): a noisy release is never shared between runs.
On disk, caches go through `datasets.write_cache` / `read_cache` (atomic, a format that cannot run code, keyed
by inputs and the source of the code that computes them).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class Memo(dict):
    """A dict of at most `size` entries (insertion order; the oldest leaves first)."""

    def __init__(self, size: int):
        super().__init__()
        if size < 1:
            raise ValueError("a Memo holds at least one entry")
        self.size = size

    def __setitem__(self, key: Hashable, value: Any) -> None:
        self.pop(key, None)  # a renewed entry counts as the newest
        super().__setitem__(key, value)
        while len(self) > self.size:
            del self[next(iter(self))]

    def get_or(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The value kept for `key`, else `compute()` kept and returned."""
        if key not in self:
            self[key] = compute()
        return self[key]
