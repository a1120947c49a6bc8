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
from collections.abc import Iterator
from pathlib import Path

POLL_S = 0.02
_PROC = Path("/proc")


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to the group; a group that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """True while some non-zombie process of the group exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _has_live_member(pgid)


def _live_processes() -> Iterator[tuple[Path, list[str]]]:
    """Each live (non-zombie) process's /proc entry and its stat fields after the
    parenthesised command name: state, ppid, pgrp, ..."""
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] not in ("Z", "X"):
            yield entry, fields


def _has_live_member(pgid: int) -> bool:
    if not _PROC.is_dir():
        return True
    return any(int(fields[2]) == pgid for _, fields in _live_processes())


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


def marked(marker: str) -> list[int]:
    """Live processes whose start-up environment holds `marker` (a `NAME=value` entry)."""
    wanted, me, found = marker.encode() + b"\0", os.getpid(), []
    for entry, _ in _live_processes() if _PROC.is_dir() else ():
        if int(entry.name) == me:
            continue
        try:
            if wanted in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue  # gone, or not ours to read
    return found


def _signal_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill_marked_now(marker: str) -> None:
    """KILL every process carrying `marker`, without waiting (cancelled, exiting)."""
    _signal_pids(marked(marker), signal.SIGKILL)


async def terminate_marked(marker: str, grace: float) -> list[int]:
    """TERM every process carrying `marker`, KILL what is left after `grace`; the pids found."""
    escaped = marked(marker)
    if not escaped:
        return []
    _signal_pids(escaped, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while (left := marked(marker)) and time.monotonic() < deadline:
        await asyncio.sleep(POLL_S)
    while left:
        _signal_pids(left, signal.SIGKILL)
        await asyncio.sleep(POLL_S)
        left = marked(marker)
    return escaped
