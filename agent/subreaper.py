"""The agent as its steps' child subreaper: no process of a step outlives it.

A step's process group and its `SWJOB_STEP_ID` marker find most of what a step
leaves behind, but a daemon started with `setsid env -i …` has left the group and
dropped the marker. With `prctl(PR_SET_CHILD_SUBREAPER)` the kernel reparents every
orphaned descendant of the agent to the agent instead of PID 1, so at step end every
process whose parent chain leads to the agent (other than what the agent runs itself)
is the step's leftover, and is terminated and reaped here. Linux only: elsewhere (or
if prctl fails) the marker scan remains the only net.

Nothing is swept unless `become_subreaper` succeeded: a process that is not the
subreaper (a test running a Supervisor in-process) may have children that are not a
step's. Only pids found this way are reaped (`waitpid(pid)`), never `waitpid(-1)`, which would
steal the exit status of a child asyncio or `subprocess` is waiting for.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import time
from collections.abc import Collection
from pathlib import Path

log = logging.getLogger("swjob.agent")

PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.02
_PROC = Path("/proc")
_active = False  # set once this process is the subreaper: only then are orphans ours


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants; False where that cannot be."""
    if not sys.platform.startswith("linux"):
        return False
    if not (_PROC / str(os.getpid())).is_dir():
        # Orphans reparented to a subreaper that cannot list them would stay zombies in
        # the step's group for ever; left to PID 1 they are reaped and the group ends.
        log.warning("no process table in /proc: not becoming child subreaper")
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:
        log.warning("cannot become child subreaper (%s): relying on the step marker", exc)
        return False
    global _active
    _active = True
    return True


def _parents() -> dict[int, tuple[int, bool]]:
    """Every process: pid → (parent pid, is a zombie)."""
    table = {}
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), fields[0] in ("Z", "X"))
    return table


def descendants(keep: Collection[int] = ()) -> tuple[list[int], list[int]]:
    """This process's descendants, except the subtrees rooted at `keep`: (live, zombies);
    none at all unless this process is the subreaper."""
    if not _active:
        return [], []
    table = _parents()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    live, zombies, todo = [], [], [p for p in children.get(os.getpid(), []) if p not in keep]
    while todo:
        pid = todo.pop()
        (zombies if table[pid][1] else live).append(pid)
        todo.extend(children.get(pid, []))
    return live, zombies


def _reap(pids: Collection[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _signal(pids: Collection[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill_leftovers_now(keep: Collection[int] = ()) -> None:
    """KILL every descendant (but `keep`), without waiting (cancelled, exiting)."""
    live, zombies = descendants(keep)
    _signal(live, signal.SIGKILL)
    _reap(zombies)


async def terminate_leftovers(grace: float, keep: Collection[int] = ()) -> list[int]:
    """TERM every descendant (but `keep`), KILL what is left after `grace`, reap them
    all; the pids that were alive."""
    live, zombies = descendants(keep)
    _reap(zombies)
    if not live:
        return []
    _signal(live, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while True:
        left, zombies = descendants(keep)
        _reap(zombies)
        if not left:
            return live
        if time.monotonic() >= deadline:
            _signal(left, signal.SIGKILL)
        await asyncio.sleep(POLL_S)
