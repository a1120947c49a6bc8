"""Is a process still there? Tests look up the pids they started, never names."""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import signal
import subprocess
import time
from pathlib import Path

import psutil

from engine.state.paths import cache_dir

TGKILL = {"x86_64": 234, "aarch64": 131}  # the syscall's number: Python has no wrapper
CAN_SIGNAL_A_THREAD = platform.system() == "Linux" and platform.machine() in TGKILL


def signal_a_side_thread(pid: int, sig: signal.Signals) -> None:
    """`sig` to a thread of `pid` other than its main one (Linux's tgkill): the kernel may
    give a process's signal to any thread, and one given to a runtime's worker thread
    while the main thread sleeps in the event loop must still wake it."""
    tid = next(int(t.name) for t in Path(f"/proc/{pid}/task").iterdir() if int(t.name) != pid)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(TGKILL[platform.machine()], pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


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
    """The local nodes' directories in this test's cache dir."""
    nodes = cache_dir() / "nodes"
    return sorted(p.name for p in nodes.iterdir()) if nodes.exists() else []


def fork_servers(parent: int) -> list[int]:
    """Pids of the agents' fork servers that process `parent` started."""
    found = []
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(parent).children():
            with contextlib.suppress(psutil.Error):
                if "--fork-server" in _command_line(child):
                    found.append(child.pid)
    return found


def _command_line(process: psutil.Process, settle_s: float = 5.0) -> list[str]:
    """`process`'s arguments. A child just started reads none for a moment (Popen returns
    once its exec is past the point of no return, before the kernel has laid out its new
    stack): read again until it has some, as a loaded machine may take a while."""
    deadline = time.monotonic() + settle_s
    while not (argv := process.cmdline()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return argv


def kill_own_fork_server() -> None:
    """Kill this process's fork server (by pid) and wait until its reader has seen it go
    (reaped is not enough: the reader reaps it, then marks it gone), so the next local
    node, or warm(), starts a new one."""
    from engine.providers import forkserver
    from tests.support.waiting import eventually

    killed = fork_servers(os.getpid())
    for pid in killed:
        kill_quietly(pid)
        eventually(
            lambda pid=pid: pid not in [c.pid for c in psutil.Process().children()],
            what="the killed fork server reaped",
        )
    server = forkserver._server
    if server is not None and server.pid in killed:
        eventually(lambda: not server.running, what="the killed fork server seen gone")
