"""A state file's write failed: how that is told, in one line naming the file.

Any process of the user can hold the write lock of runs.sqlite or ledger.sqlite for as
long as it likes (a second swjob mid-write, a `sqlite3` shell with `BEGIN EXCLUSIVE;`
left open, a backup tool). sqlite's own answer is "database is locked", which names
neither the file nor the cause; the user needs both to find the culprit.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from engine.errors import UnusableDirError, one_line


class StateNotWritten(UnusableDirError):
    """A write to a state file failed for now (locked, disk full); one line naming it. A
    command that cannot open its state for it says that line and exits 1."""


def held_elsewhere(exc: sqlite3.Error) -> bool:
    """Whether the write failed because another connection holds the file's lock."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def not_written(path: Path, exc: sqlite3.Error) -> StateNotWritten:
    """The error to raise for a failed write of `path`."""
    if held_elsewhere(exc):
        return StateNotWritten(f"{path} is locked by another process")
    return StateNotWritten(f"{path}: {one_line(exc)}")
