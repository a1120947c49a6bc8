"""Hosts that let a run down, remembered for a while so the next run rents elsewhere.

A Vast machine whose node never joined, was lost or failed its pre-flight is kept in the
state dir's `bad_hosts.json` (machine id, provider, reason, when, until when: the pool's
`bad_host_ttl_h`) and left out of offer selection until then; `swjob hosts` lists them,
`swjob hosts forget ID|--all` clears (docs/pools.md). Every process reads and writes the
file under one lock, replaced whole, so two runs ending at once both stay on record.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.state.paths import state_dir
from engine.state.wholefile import replace_whole

FILE = "bad_hosts.json"


@dataclass(frozen=True)
class BadHost:
    provider: str
    machine_id: str
    reason: str
    at: float  # when it was remembered (epoch seconds)
    until: float  # when it is forgotten by itself


def _path() -> Path:
    return state_dir() / FILE


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    fd = os.open(state_dir() / f".{FILE}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read() -> list[BadHost]:
    """The unexpired entries; an unreadable file is no memory (it is rewritten whole)."""
    try:
        rows = json.loads(_path().read_text(encoding="utf-8"))
        hosts = [BadHost(**row) for row in rows]
    except (OSError, ValueError, TypeError):
        return []
    now = time.time()
    return [host for host in hosts if host.until > now]


def _write(hosts: list[BadHost]) -> None:
    replace_whole(_path(), json.dumps([asdict(host) for host in hosts], indent=1) + "\n")


def listed() -> list[BadHost]:
    """Every host remembered now, the latest first."""
    return sorted(_read(), key=lambda host: host.at, reverse=True)


def machines(provider: str) -> set[str]:
    """The machine ids of `provider` that offer selection leaves out."""
    return {host.machine_id for host in _read() if host.provider == provider}


def remember(provider: str, machine_id: str, reason: str, ttl_h: float) -> None:
    """Keep `machine_id` out of offer selection for `ttl_h` hours (its newest reason)."""
    now = time.time()
    with _locked():
        hosts = [h for h in _read() if (h.provider, h.machine_id) != (provider, machine_id)]
        hosts.append(BadHost(provider, machine_id, reason, now, now + ttl_h * 3600))
        _write(hosts)


def forget(machine_id: str | None) -> list[BadHost]:
    """Forget one machine (None: every one); the entries forgotten."""
    with _locked():
        hosts = _read()
        gone = [h for h in hosts if machine_id is None or h.machine_id == machine_id]
        _write([h for h in hosts if h not in gone])
    return gone
