"""A step's marker is looked for only in processes that started with or after the step:
an older one cannot have inherited it, and reading every environment on the node cost
each step's exit tens of milliseconds."""

from __future__ import annotations

import os
import subprocess

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
