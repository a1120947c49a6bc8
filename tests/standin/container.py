"""A container's init for the Vast.ai stand-in: runs the on-start script, reaps, waits.

A real instance is a container that keeps running after its on-start script returns
(Vast's own init stays up) until it is destroyed. This plays that part on this
machine: it becomes a child subreaper (so whatever the script backgrounds is
re-parented here, not to the system's init), runs `bash <script>`, reaps every
descendant that exits, and stays up. On SIGTERM (the stand-in's destroy) it kills
every descendant, reaps them and exits, so a destroyed instance leaves no process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
RESCAN_S = 0.02


def descendants(root: int) -> list[int]:
    """Live (non-zombie) processes below `root`, from /proc."""
    parent_of: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parent_of[int(entry.name)] = int(fields[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, pp in parent_of.items() if pp == pid]
        found += children
        frontier += children
    return found


def kill_all(*_: object) -> None:
    """Kill every descendant, until two scans a moment apart find none. One empty scan is
    not enough: a scan reads each process's parent at its own moment, so a job whose
    parent (the agent) dies during the scan can be read as the dead agent's child, and the
    agent as a zombie (left out): the chain to us broken, the job missed, left running
    after its instance was destroyed (the suite's leftover net caught a `sleep 60`)."""
    me, empty = os.getpid(), 0
    while empty < 2:
        pids = descendants(me)
        empty = 0 if pids else empty + 1
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reap()
        if not pids:
            time.sleep(RESCAN_S)
    sys.exit(0)


def reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGTERM, kill_all)
    subprocess.Popen(["bash", sys.argv[1]], stdin=subprocess.DEVNULL)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            signal.pause()  # nothing left to reap: stay up until destroyed


if __name__ == "__main__":
    main()
