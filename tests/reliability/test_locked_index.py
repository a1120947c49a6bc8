"""Another process holds runs.sqlite's write lock for longer than sqlite's busy timeout
(5 s) while a run ends: `swjob runs` or a second console in a long write, a backup tool,
a user's sqlite3 shell. The run's index writes must wait their turn, not be lost: a lost
write left the run driverless mid-teardown (its node up, `swjob run` waiting forever),
and its row unfinished for an adopter to take after the fact."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from engine.state.paths import state_dir
from engine.state.store import Store
from tests.support.cli import Cli
from tests.support.processes import pid_alive, reap
from tests.support.runs import agent_pid, only_run_dir, waiting_job
from tests.support.waiting import eventually

BUSY_TIMEOUT_S = 5.0
"""sqlite3.connect's default: how long a write waits for another process's lock."""

HOLDER = """
import sqlite3, sys, pathlib
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
pathlib.Path(sys.argv[2]).touch()
sys.stdin.read()
db.execute("COMMIT")
"""
"""Holds the index's write lock until its stdin closes."""


def test_a_run_ends_and_is_indexed_across_a_lock_held_past_the_busy_timeout(
    tmp_path: Path, clis: Callable[..., Cli], record_fault: Callable[..., None]
) -> None:
    release = tmp_path / "release"
    job = waiting_job(tmp_path / "job", "locked", release)
    cli = clis("run", str(job), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    run_dir = only_run_dir(tmp_path / "runs", "locked")
    eventually(lambda: cli.has_printed("run | line 3"), 60, "the job running")
    agent = agent_pid(run_dir)
    locked = tmp_path / "locked"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state_dir() / "runs.sqlite"), str(locked)],
        stdin=subprocess.PIPE,
    )
    try:
        eventually(locked.exists, 30, "the index locked by another process")
        release.touch()  # the job ends: its exit's index row waits behind the lock
        time.sleep(BUSY_TIMEOUT_S + 2)  # the fault is a duration: held past the timeout
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(10) == 0
    finally:
        reap(holder)
    assert cli.wait(30) == 0, cli.output()
    store = Store()
    try:
        view = store.find(run_dir.name)
        assert store.unfinished() == []
    finally:
        store.close()
    assert view is not None and view.finished is not None and view.state == "COMPLETED"
    assert not pid_alive(agent)
    assert (run_dir / "outputs" / "out.txt").read_text() == "done\n"
    record_fault("runs.sqlite locked by another process for 7 s as a run ends", None,
                 "index writes wait; run ends COMPLETED, indexed finished", "nothing")  # fmt: skip
