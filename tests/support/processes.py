"""Is a process still there? Tests look up the pids they started, never names."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from engine.state.paths import cache_dir
from tests.support.leftovers import processes_under


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (PID 1 here may never reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def reap(process: subprocess.Popen[str]) -> None:
    """End a process the test started (by its pid), wait for it and close its output pipe:
    the `finally` of every test that kills a `swjob` on purpose."""
    process.kill()
    process.wait()
    if process.stdout:
        process.stdout.close()


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> None:
    """Cleanup for a test's own stray process (by pid); it may well be gone already."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def node_dirs() -> list[str]:
    """The local nodes' directories in this test's cache dir (standby ones included)."""
    nodes = cache_dir() / "nodes"
    return sorted(p.name for p in nodes.iterdir()) if nodes.exists() else []


def standby_agents() -> list[int]:
    """Pids of the agents waiting in standby in this test's cache dir."""
    waiting = processes_under(cache_dir() / "nodes")
    return sorted(p.pid for p in waiting if "--standby" in (p.info["cmdline"] or ()))
