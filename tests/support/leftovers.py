"""Nothing a test starts may outlive it: agents, stand-in instances, jobs.

Every process a test starts names a path inside the test's own tmp dir on its command
line (an agent's --root, an instance's on-start script) or works in one (a local agent
in its node directory: a forked one's command line is its fork server's), so those pids
are found by that unique path, then ended by pid (with what is left of the step each
agent recorded: agent/procgroup.py `kill_recorded_step_now`)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import psutil

from agent import procgroup

GRACE_S = 3.0


def processes_under(root: Path) -> list[psutil.Process]:
    """Live processes (not this one) whose command line names a path inside `root`, or
    whose working directory is in it.

    /proc is read raw first (a command line's bytes, a cwd link): every test's teardown
    looks through every process on the machine at least once, and psutil's per-process
    objects cost ~6 ms a look at a hundred processes; only the few that match become
    psutil processes (status, kill)."""
    marker, me, found = f"{root}/", os.getpid(), []
    raw_marker = os.fsencode(marker)
    for pid in _pids():
        if pid == me or not _names(pid, marker, raw_marker):
            continue
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _names(pid: int, marker: str, raw_marker: bytes) -> bool:
    """Does process `pid` name `marker` on its command line (its arguments, NUL-separated:
    a path holds no NUL, so a match lies within one argument) or in `cwd + "/"`?"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            if raw_marker in cmdline.read():
                return True
    except OSError:
        return False  # gone
    try:
        return marker in f"{os.readlink(f'/proc/{pid}/cwd')}/"
    except OSError:
        return False  # gone, or not ours to read


def end_leftovers(root: Path) -> list[str]:
    """Give what is still running under `root` a moment to finish its own exit, then kill
    it and the job groups its agents recorded; what had to be killed, one line each."""
    deadline = time.monotonic() + GRACE_S
    while (left := processes_under(root)) and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = []
    for process in left:
        with contextlib.suppress(psutil.Error):
            killed.append(f"pid {process.pid}: {' '.join(process.cmdline())[:200]}")
            process.kill()
    for record in _pgid_files(root):
        procgroup.kill_recorded_step_now(record)  # the steps' own, never a recycled group
    return killed


def _pgid_files(root: Path) -> list[Path]:
    """Every agent's `state/step.pgid` under `root`. A walk, not `rglob`: a directory may
    vanish under it (a stand-in instance the test saw go is still being removed), which
    `os.walk` skips and `rglob` raised on, failing a test that had passed."""
    return [
        Path(path) / "step.pgid"
        for path, _, files in os.walk(root)
        if Path(path).name == "state" and "step.pgid" in files
    ]
