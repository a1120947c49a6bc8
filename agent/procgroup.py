"""Signalling and watching a job's process group until nothing of it is left.

Every step runs in its own session, so its process group id is the leader's pid
and every child it forks (unless it calls setsid itself) is in that group. A child
that does leave the group (`setsid`, a double-forked daemon) still carries the
step's marker in the environment it was started with, and is found by that. Zombies
count as gone: an orphaned child is reaped by whoever is PID 1 on the node, which
in a container may never do it, yet a zombie holds no resources and runs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from agent import steprecord

POLL_S = 0.02
EXEC_SETTLE_S = 0.5  # how long an empty environment may be one caught inside execve
EXEC_SETTLE_POLL_S = 0.005


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to the group; a group that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """True while some non-zombie process of the group exists.

    The kernel's answer (killpg with signal 0) counts zombies too; psutil tells them
    apart. Where processes cannot be listed at all (Linux with /proc hidden, say),
    the kernel's answer stands: reporting a live group as gone would skip its TERM."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    processes = _live_processes()
    if processes is None:
        return True
    return any(p.pgid == pgid for p in processes)


@dataclass(frozen=True)
class _Live:
    """A live process as one look at it found it."""

    pid: int
    pgid: int | None  # None: gone by the time its group was asked (psutil's way only)
    started: float  # on psutil's clock (`started_at`)


def _live_processes() -> list[_Live] | None:
    """Every live (non-zombie) process but this one, or None when this machine does not
    let us list processes (our own pid missing from the list means we are blind).

    Each one is looked at afresh: a Process kept from an earlier look (as
    `psutil.process_iter` keeps them) had the start time of whatever had the pid then,
    so a step's escapee that got a recycled pid read as started before the step and
    was skipped — left running (a test saw it under the full suite's churn).

    On Linux one read of `/proc/<pid>/stat` a process says all three (state, group,
    start): psutil read it twice and `/proc/stat` once for each, and a group's wait polls
    this every 20 ms — a hundred local nodes read ~110,000 files a hundred-job run."""
    try:
        return _from_proc() if os.path.isfile("/proc/self/stat") else _from_psutil()
    except Exception:  # a /proc or a psutil that fails in some other way: blind
        return None


def _from_proc() -> list[_Live] | None:
    me, found, seen_self = os.getpid(), [], False
    boot = psutil.boot_time()  # what psutil adds to each start (same value, read once)
    ticks = os.sysconf("SC_CLK_TCK")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()  # the name may hold spaces or ")"
        pid = int(name)
        if pid == me:
            seen_self = True
        elif fields[0] not in _GONE_STATES:
            found.append(_Live(pid, int(fields[2]), float(fields[19]) / ticks + boot))
    return found if seen_self else None


_GONE_STATES = (b"Z", b"X", b"x")  # zombie, dead


def _from_psutil() -> list[_Live] | None:
    me, found, seen_self = os.getpid(), [], False
    for pid in psutil.pids():
        try:
            info = psutil.Process(pid).as_dict(["status", "create_time"])
        except psutil.NoSuchProcess:
            continue  # ended meanwhile
        if pid == me:
            seen_self = True
        elif info["status"] not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            found.append(_Live(pid, _pgid(pid), info["create_time"] or 0.0))
    return found if seen_self else None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None  # gone meanwhile


async def wait_group_gone(pgid: int, timeout: float | None) -> bool:
    """Poll until the group is gone (True) or `timeout` seconds passed (False)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while group_alive(pgid):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


async def terminate_group(pgid: int, grace: float) -> None:
    """TERM the group, give it `grace` seconds, KILL what is left, return once all is gone."""
    if not group_alive(pgid):
        return
    signal_group(pgid, signal.SIGTERM)
    if not await wait_group_gone(pgid, grace):
        signal_group(pgid, signal.SIGKILL)
        await wait_group_gone(pgid, None)


def kill_group_now(pgid: int) -> None:
    """Last resort when we cannot wait (cancelled, exiting): KILL without ceremony."""
    signal_group(pgid, signal.SIGKILL)


def started_at(pid: int) -> float:
    """When process `pid` started, on psutil's clock (0.0 when it cannot be told)."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def marked(marker: str, since: float = 0.0) -> list[int]:
    """Live processes whose start-up environment holds `marker` (a `NAME=value` entry);
    none where processes cannot be listed or their environments read.

    Only processes started at `since` or later are read (`started_at` of the step's
    leader: whatever inherited its environment started after it). Reading another
    process's environment is the costly part — 50-70 ms for a hundred processes on a
    busy machine, on every step's way out — and a node's older processes cannot hold a
    marker made for this step."""
    name, _, value = marker.partition("=")
    found = []
    settled_by = time.monotonic() + EXEC_SETTLE_S
    for live in _live_processes() or ():
        if live.started < since:
            continue
        try:
            if _environ(psutil.Process(live.pid), settled_by).get(name) == value:
                found.append(live.pid)
        except (psutil.Error, OSError):
            continue  # gone, or not ours to read
    return found


def _environ(process: psutil.Process, settled_by: float) -> dict[str, str]:
    """`process`'s start-up environment. One that reads empty is read again until the
    monotonic time `settled_by`: a process inside execve reads so (its parent has already
    been told the exec succeeded, the kernel has not yet laid out the new stack), and an
    escapee the job launched at that moment would otherwise be left running. Only a
    process that shows no arguments either is waited for, and all of them together for
    EXEC_SETTLE_S at most: one started with no environment (`env -i`) costs nothing."""
    while not (environ := process.environ()) and time.monotonic() < settled_by:
        if process.cmdline():  # laid out (with its arguments), maybe since the first read
            return process.environ()
        time.sleep(EXEC_SETTLE_POLL_S)
    return environ


def _signal_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill_marked_now(marker: str, since: float = 0.0) -> None:
    """KILL every process carrying `marker`, without waiting (cancelled, exiting)."""
    _signal_pids(marked(marker, since), signal.SIGKILL)


async def terminate_marked(marker: str, grace: float, since: float = 0.0) -> list[int]:
    """TERM every process carrying `marker` (started since `since`), KILL what is left
    after `grace`; the pids found. The search reads every young process's environment
    (and may wait out an exec): a thread's work, not the agent's event loop's."""
    escaped = await asyncio.to_thread(marked, marker, since)
    if not escaped:
        return []
    _signal_pids(escaped, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (left := await asyncio.to_thread(marked, marker, since)) and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
    while left:
        _signal_pids(left, signal.SIGKILL)
        await asyncio.sleep(POLL_S)
        left = await asyncio.to_thread(marked, marker, since)
    return escaped


def kill_recorded_step_now(record_file: Path) -> None:
    """KILL what is left of the step an agent recorded in `record_file` (agent/steprecord.py)
    before it died without ending it; a file that holds no record kills nothing.

    The recorded number alone is no proof: once the agent is gone, nothing keeps the
    leader's pid from being reused, and a recycled group id may now be the user's shell.
    So the group is killed only while one of its live members carries the step's marker,
    which an unrelated group cannot (the marker is made fresh for each step). Members that
    shed the marker (`env -i`) are left when no marked member remains: with no proof, the
    group is not ours to kill. Processes that left the group (`setsid`) are found by the
    marker too, among those started since the recorded start. Where processes cannot be
    listed or their environments read, nothing is proven and nothing is killed. Never
    raises for what a job may do: callers are teardowns and test nets."""
    record = steprecord.read(record_file)
    if record is None:
        return
    carriers = marked(record.marker, record.started)
    if any(_pgid(pid) == record.pgid for pid in carriers):
        with contextlib.suppress(PermissionError):  # none of it ours (setuid): go on to the rest
            kill_group_now(record.pgid)
    with contextlib.suppress(PermissionError):
        kill_marked_now(record.marker, record.started)
