"""The run index (runs.sqlite) cannot be written while a run ends.

Another process holds its write lock past sqlite's busy timeout (5 s): `swjob runs` or a
second console in a long write, a backup tool, a user's sqlite3 shell. The run's index
writes must wait their turn, not be lost: a lost write left its row unfinished for an
adopter to take after the fact.

The state dir's disk is full: the index write fails, and the run must still end (its
node torn down, `swjob run` exiting) with the failure said. A failed write raised inside
the run's driver left it driverless mid-teardown: its node up, `swjob run` waiting forever.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.state.paths import state_dir
from engine.state.store import Store
from tests.support.cli import Cli
from tests.support.disks import tmpfs
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


def _running(tmp_path: Path, clis: Callable[..., Cli]) -> tuple[Cli, Path, int]:
    """A real `swjob run` of a job that ends once `tmp_path/release` exists, once its job
    is running: the process, its run dir and its local agent's pid."""
    job = waiting_job(tmp_path / "job", "indexed", tmp_path / "release")
    cli = clis("run", str(job), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    run_dir = only_run_dir(tmp_path / "runs", "indexed")
    eventually(lambda: cli.has_printed("run | line 3"), 60, "the job running")
    return cli, run_dir, agent_pid(run_dir)


def _ended_with_node_gone(cli: Cli, run_dir: Path, agent: int) -> None:
    assert cli.wait(60) == 0, cli.output()
    assert not pid_alive(agent)
    assert (run_dir / "outputs" / "out.txt").read_text() == "done\n"


def test_a_run_ends_and_is_indexed_across_a_lock_held_past_the_busy_timeout(
    tmp_path: Path, clis: Callable[..., Cli], record_fault: Callable[..., None]
) -> None:
    cli, run_dir, agent = _running(tmp_path, clis)
    locked = tmp_path / "locked"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state_dir() / "runs.sqlite"), str(locked)],
        stdin=subprocess.PIPE,
    )
    try:
        eventually(locked.exists, 30, "the index locked by another process")
        (tmp_path / "release").touch()  # the job ends: its exit's index row waits behind the lock
        time.sleep(BUSY_TIMEOUT_S + 2)  # the fault is a duration: held past the timeout
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(10) == 0
    finally:
        reap(holder)
    _ended_with_node_gone(cli, run_dir, agent)
    store = Store()
    try:
        view = store.find(run_dir.name)
        assert store.unfinished() == []
    finally:
        store.close()
    assert view is not None and view.finished is not None and view.state == "COMPLETED"
    record_fault("runs.sqlite locked by another process for 7 s as a run ends", None,
                 "index writes wait; run ends COMPLETED, indexed finished", "nothing")  # fmt: skip


def test_a_run_ends_when_its_index_cannot_be_written(
    tmp_path: Path,
    clis: Callable[..., Cli],
    monkeypatch: pytest.MonkeyPatch,
    record_fault: Callable[..., None],
) -> None:
    with tmpfs(tmp_path / "state-disk", "2m") as disk:
        monkeypatch.setenv("SWJOB_STATE_DIR", str(disk.path))
        cli, run_dir, agent = _running(tmp_path, clis)
        disk.fill()
        (tmp_path / "release").touch()
        _ended_with_node_gone(cli, run_dir, agent)
        alert = next(line for line in cli.output().splitlines() if "run index not written" in line)
        assert "database or disk is full" in alert
        disk.free_up()
    record_fault("the state dir's disk full as a run ends", None,
                 "run ends COMPLETED, node torn down, alert said", "its index row")  # fmt: skip
