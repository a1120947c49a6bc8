"""Another process holding a state file's write lock, as a user's `sqlite3` shell does
after `BEGIN EXCLUSIVE;`, for as long as the test says: ended by its pid."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.support.processes import reap
from tests.support.waiting import eventually

HOLDER = """
import pathlib, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
pathlib.Path(sys.argv[2]).touch()
time.sleep(3600)
"""


@contextlib.contextmanager
def locked(database: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`database` write-locked by another process until the block ends (it is killed)."""
    held = database.with_name(database.name + ".held")
    held.unlink(missing_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(database), str(held)])
    try:
        eventually(held.exists, 30, f"{database.name} locked by another process")
        yield holder
    finally:
        reap(holder)
        held.unlink(missing_ok=True)
