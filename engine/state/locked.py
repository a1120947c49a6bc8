"""A state file's write failed: how that is told, in one line naming the file.

Any process of the user can hold the write lock of runs.sqlite or ledger.sqlite for as
long as it likes (a second swjob mid-write, a `sqlite3` shell with `BEGIN EXCLUSIVE;`
left open, a backup tool). sqlite's own answer is "database is locked", which names
neither the file nor the cause; the user needs both to find the culprit.
"""

from __future__ import annotations

import sqlite3
import time
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


def into_wal(db: sqlite3.Connection, wait_s: float) -> None:
    """Put `db` in WAL mode, waiting at most `wait_s` for another process's lock like any
    write (then its sqlite3.Error is raised). On a new file sqlite answers the switch
    "locked" at once, with no busy wait, while another process is creating the same file:
    two swjobs started together on a fresh state dir, one failed "ledger.sqlite is locked
    by another process"."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.Error as exc:
            if not held_elsewhere(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(0.02)
