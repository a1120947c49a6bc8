"""Is a process still there? Tests look up the pids they started, never names."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path


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
