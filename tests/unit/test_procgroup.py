"""A step's marker is looked for only in processes that started with or after the step:
an older one cannot have inherited it, and reading every environment on the node cost
each step's exit tens of milliseconds. On Linux the process table is read straight from
/proc (one file a process); it must say what psutil says: who lives, their group, when
each started, and no zombie."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import procgroup
from tests.support.processes import reap


def test_marked_reads_only_processes_started_since(tmp_path) -> None:
    marker = f"SWJOB_TEST_MARK={os.getpid()}-{tmp_path.name}"
    name, _, value = marker.partition("=")
    holder = subprocess.Popen(["sleep", "60"], env={**os.environ, name: value}, text=True)
    try:
        started = procgroup.started_at(holder.pid)
        assert started > 0
        assert procgroup.marked(marker, since=started) == [holder.pid]
        assert procgroup.marked(marker) == [holder.pid]  # no bound: every process
        assert procgroup.marked(marker, since=started + 1) == []  # it started before that
    finally:
        reap(holder)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_the_proc_reader_says_what_psutil_says() -> None:
    leader = subprocess.Popen(["sleep", "60"], start_new_session=True)
    zombie = subprocess.Popen(["true"])
    try:
        stat = Path(f"/proc/{zombie.pid}/stat")
        deadline = time.monotonic() + 10
        while b") Z " not in stat.read_bytes():  # exited, not yet reaped: a zombie
            assert time.monotonic() < deadline
            time.sleep(0.01)
        lean, psutil_view = procgroup._from_proc(), procgroup._from_psutil()
        assert lean is not None and psutil_view is not None
        by_pid = {live.pid: live for live in lean}
        assert by_pid[leader.pid] == procgroup._Live(
            leader.pid, leader.pid, procgroup.started_at(leader.pid)
        )
        assert zombie.pid not in by_pid and os.getpid() not in by_pid
        both = set(by_pid) & {live.pid for live in psutil_view}
        assert {by_pid[pid] for pid in both} == {live for live in psutil_view if live.pid in both}
        assert procgroup.group_alive(leader.pid)
    finally:
        reap(leader)
        reap(zombie)
