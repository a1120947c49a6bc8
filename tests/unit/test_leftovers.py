"""The net under every test (tests/conftest.py): a process that names the test's tmp dir
on its command line and is still running afterwards is found, killed and reported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.leftovers import end_leftovers, processes_under
from tests.support.processes import pid_alive


def test_a_process_left_under_the_tmp_dir_is_found_and_killed(tmp_path: Path) -> None:
    marker = tmp_path / "node-root"
    code = "import sys, time; time.sleep(60)"
    left = subprocess.Popen([sys.executable, "-c", code, str(marker)])
    elsewhere = tmp_path.parent / f"{tmp_path.name}-sibling"
    other = subprocess.Popen([sys.executable, "-c", code, str(elsewhere)])
    try:
        assert [p.pid for p in processes_under(tmp_path)] == [left.pid]
        killed = end_leftovers(tmp_path)
        left.wait(5)
        assert len(killed) == 1 and f"pid {left.pid}" in killed[0]
        assert not pid_alive(left.pid) and pid_alive(other.pid)  # only what names this dir
    finally:
        for process in (left, other):
            process.kill()
            process.wait()
