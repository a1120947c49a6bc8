"""The operator's iroh identity, kept across restarts so nodes still obey it.

A node obeys only the orchestrator id it was started with, so an engine that crashes
and restarts must come back with the same secret key — and, where no relay can find
it, on the same UDP port. Identities live in numbered slots in the state dir, each
guarded by a lock file: the first engine takes slot 0, a second engine running at the
same time (a TUI and a CLI) takes slot 1. A slot is only an address: which runs an
engine drives is decided by per-run leases (engine/state/ownership.py).

A slot's port is drawn from STABLE_PORTS, outside the range the kernel hands out to
`bind(0)`: while the engine is down (between a crash and its restart) an ephemeral
port is anyone's, and on a busy machine someone takes it — every iroh endpoint binds
dozens of them a second for its DNS queries, and a freed ephemeral port was taken
within 2-8 s one time in twenty. The restarted engine then binds elsewhere and, where
no relay finds it, its nodes dial an address nobody answers.

The operator id is something else: a short random name for this state dir (this
operator), written into every Vast.ai instance label, so `swjob gc` on an account shared
with other operators destroys only what this operator created.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from iroh import iroh_ffi

from engine.state.paths import state_dir
from engine.state.planted import refuse_planted
from engine.state.wholefile import replace_whole

SLOTS = 8
STABLE_PORTS = range(20000, 32768)
"""Below the ephemeral ports of Linux (32768-60999), macOS and Windows (49152-65535)."""
FRESH_TRIES = 8  # another engine, or a service, may hold a port drawn from STABLE_PORTS


@dataclass
class Identity:
    slot: int
    secret_key: bytes
    port: int | None
    _lock: IO[bytes]

    @property
    def _port_file(self) -> Path:
        return state_dir() / f"engine-{self.slot}.port"

    def ports_to_try(self, *, fresh: bool = True) -> list[int | None]:
        """Last time's port first, then (with `fresh`) a few from STABLE_PORTS; None: the
        port the endpoint's configuration gives (see agent/endpoint.py)."""
        kept: list[int | None] = [self.port] if self.port is not None or not fresh else []
        return kept + (random.sample(STABLE_PORTS, FRESH_TRIES) if fresh else [])

    def remember_port(self, port: int | None) -> None:
        if port is not None:
            replace_whole(self._port_file, str(port))

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()


def acquire() -> Identity:
    """Take the first free identity slot (creating its key on first use)."""
    root = state_dir()
    for slot in range(SLOTS):
        for name in ("lock", "key", "port"):  # a fifo here hung the engine's start for good
            refuse_planted(root / f"engine-{slot}.{name}")
        lock = (root / f"engine-{slot}.lock").open("ab")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return Identity(slot, _key(root / f"engine-{slot}.key"), _port(root, slot), lock)
    raise RuntimeError(f"all {SLOTS} engine identity slots in {root} are in use")


def _key(path: Path) -> bytes:
    try:
        key = path.read_bytes()
        if len(key) == 32:
            return key
    except FileNotFoundError:
        pass
    key = iroh_ffi.SecretKey.generate().to_bytes()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key


def _port(root: Path, slot: int) -> int | None:
    try:
        return int((root / f"engine-{slot}.port").read_text())
    except (OSError, ValueError):
        return None


def operator_id() -> str:
    """This operator's id (8 hex digits), created on first use and kept in the state dir."""
    path = state_dir() / "operator-id"
    refuse_planted(path)
    try:
        found = path.read_text().strip()
        if len(found) == 8:
            return found
    except FileNotFoundError:
        pass
    fresh = secrets.token_hex(4)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # another process wrote it first: theirs is the one
        return path.read_text().strip()
    with os.fdopen(fd, "w") as handle:
        handle.write(fresh)
    return fresh
