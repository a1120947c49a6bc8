"""Two swjobs opening a new state file at once (a fresh state dir, two terminals).

The first to open runs.sqlite or ledger.sqlite creates it and switches it to WAL mode
while the other opens it too; sqlite answers the other's switch "database is locked" at
once, without the bounded wait any write gets. Two `swjob run` started together on a
fresh state dir: one failed at start, "ledger.sqlite is locked by another process".
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from engine.state.ledger import Ledger
from engine.state.store import Store
from tests.support.processes import reap
from tests.support.waiting import eventually

CREATOR = """
import pathlib, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")  # mid-creation of the new file, as another swjob's first open
db.execute("CREATE TABLE first (a)")
pathlib.Path(sys.argv[2]).touch()
time.sleep(0.2)
db.execute("COMMIT")
"""


@pytest.mark.parametrize("opener", [Ledger, Store], ids=["ledger", "index"])
def test_a_new_state_file_opened_while_another_process_creates_it(
    tmp_path: Path, opener: Callable[[Path], object]
) -> None:
    path = tmp_path / "state.sqlite"
    held = tmp_path / "held"
    creator = subprocess.Popen([sys.executable, "-c", CREATOR, str(path), str(held)])
    try:
        eventually(held.exists, 30, "the other process creating the file")
        opener(path)  # waits out the other's 0.2 s, as a write would (WRITE_WAIT_S)
        assert creator.wait(30) == 0
    finally:
        reap(creator)
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
