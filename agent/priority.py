"""A local node gives way to its operator: its processes ask for less of the CPU.

On a laptop the node shares two to sixteen cores with the console and the engine that
draw it. Linux shares CPU time between sessions first (autogroup: every `setsid` starts
a group, and a node's agent and each of its steps lead sessions of their own), and only
then between the processes in one — so a plain `nice` did nothing: twelve nodes starting
at once held twelve shares to the console's one, and its loop waited for a core.
`give_way` lowers a process's group share (/proc/<pid>/autogroup) and its own nice
value, which is what counts where autogroup is off (cgroup v2's cpu controller, macOS).
Lowering needs no privilege. A rented node is the job's machine: it is never niced.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

MAX_NICE = 19


def give_way(nice: int, pid: int = 0) -> None:
    """Lower `pid`'s CPU share (0: this process's) to `nice` (0: leave it as it is). What
    the platform lacks (no autogroup, no /proc) is left: the node runs, only less politely."""
    if nice <= 0:
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid or 'self'}/autogroup").write_text(f"{nice}\n")


def shell_argv(command: str, nice: int) -> list[str]:
    """`/bin/sh -c command`, whose shell first lowers its own group to `nice` (0: as it
    is): a step leads a session, so a group of its own at nice 0, and set from outside
    after the spawn the job's first lines would already have run at the full share. Its
    own nice it has from the agent."""
    if nice <= 0:
        return ["/bin/sh", "-c", command]
    lower = f'echo {nice} 2>/dev/null >/proc/self/autogroup; exec /bin/sh -c "$1"'
    return ["/bin/sh", "-c", lower, "sh", command]
