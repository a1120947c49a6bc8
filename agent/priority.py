"""A local node gives way to its operator: its processes ask for less of the CPU.

On a laptop the node shares two to sixteen cores with the console and the engine that
draw it. Linux shares CPU time between sessions first (autogroup: every `setsid` starts
a group, and a node's agent and each of its steps lead sessions of their own), and only
then between the processes in one — so a plain `nice` did nothing: twelve nodes starting
at once held twelve shares to the console's one, and its loop waited for a core.
`give_way` lowers this process's group share (/proc/self/autogroup) and the nice value
of each of its threads (per thread on Linux), which is what counts where autogroup is
off (cgroup v2's cpu controller, macOS). Lowering needs no privilege, but the kernel
takes one group's change in 100 ms from a user without CAP_SYS_ADMIN (EAGAIN, whoever
made the last one): a dozen nodes starting together take turns. A rented node is the
job's machine: it is never niced.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import time
from pathlib import Path

MAX_NICE = 19
TURNS = 20
"""Tries at the group's nice, each after ~0.1 s when the kernel said "not now" (EAGAIN)."""


def give_way(nice: int) -> None:
    """Lower this process's CPU share to `nice` (0: leave it as it is). What the platform
    lacks (no autogroup, no /proc) is left: the node runs, only less politely. Blocks up
    to ~2 s while other groups' changes hold the kernel's turn."""
    if nice <= 0:
        return
    for thread in _threads():
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, thread, nice)
    for _ in range(TURNS):
        try:
            Path("/proc/self/autogroup").write_text(f"{nice}\n")
            return
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                return  # no autogroup here
        time.sleep(0.1 + random.random() * 0.05)  # another group's change had the turn


def _threads() -> list[int]:
    """This process's threads (those an import started too), or 0 (the calling one)."""
    try:
        return [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def shell_argv(command: str, nice: int) -> list[str]:
    """`/bin/sh -c command`, whose shell first lowers its own group to `nice` (0: as it
    is): a step leads a session, so a group of its own at nice 0, and set from outside
    after the spawn the job's first lines would already have run at the full share. Its
    own nice it has from the agent. The kernel's turn (see above) is waited for up to
    ~1 s, only where there is a group to lower."""
    if nice <= 0:
        return ["/bin/sh", "-c", command]
    lower = (
        "[ -w /proc/self/autogroup ] && for turn in 1 2 3 4 5 6 7 8 9 10; do "
        f"echo {nice} 2>/dev/null >/proc/self/autogroup && break; sleep 0.1; done; "
        'exec /bin/sh -c "$1"'
    )
    return ["/bin/sh", "-c", lower, "sh", command]
