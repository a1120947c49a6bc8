"""Room on the operator's disk: a file that cannot fit is refused before a byte of it lands.

Outputs can be far larger than the operator's free space (a checkpoint, a sparse
file whose size is mostly holes on the node). Filling the disk would hurt more than
the run: other files, the engine's own state. So every file is checked against the
free space of its landing filesystem before it is created, counting what the files
already being received still need (they are written chunk by chunk, in parallel).
The check uses the announced (apparent) size: a sparse file may need less, never more.
The free space is asked of the filesystem at most every `FRESH_S` while files fit in
what it said, less what was admitted since (a tree of 100,000 small outputs asked it
100,000 times); a file that does not fit in that estimate is checked against a fresh
answer before it is refused. A guard in a landing process (landproc.py) also counts what
its caller's guard has promised (`elsewhere`): the large files landing beside its batch.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from agent.transfer.errors import TransferError


class NoSpace(TransferError):
    """The file does not fit in the free space left on the landing filesystem."""


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


FRESH_S = 0.25


class SpaceGuard:
    """Admits files while they fit, with the bytes promised to files still landing."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._promised: dict[str, int] = {}
        self._lock = threading.Lock()
        self._asked_at = -FRESH_S  # when the filesystem was last asked
        self._free = 0  # what it said, less what was promised then and admitted since
        self.elsewhere = 0  # bytes another process's guard has promised on this disk

    def admit(self, path: str, size: int) -> None:
        """Promise `size` bytes to `path`, or raise NoSpace naming the file and the numbers."""
        with self._lock:
            now = time.monotonic()
            if now - self._asked_at > FRESH_S or size > self._free:
                promised = sum(self._promised.values()) + self.elsewhere
                self._free = free_bytes(self._root) - promised
                self._asked_at = now
            if size > self._free:
                raise NoSpace(
                    f"refused: needs {human(size)}, only {human(max(self._free, 0))} free "
                    f"on the landing disk ({self._root})"
                )
            self._promised[path] = size
            self._free -= size

    def promised(self) -> int:
        """The bytes promised to files still landing."""
        with self._lock:
            return sum(self._promised.values())

    def landed(self, path: str, nbytes: int = -1) -> None:
        """`nbytes` of `path` are on disk now (all of them by default): no longer promised."""
        with self._lock:
            if nbytes < 0 or path not in self._promised:
                self._promised.pop(path, None)
            else:
                self._promised[path] = max(0, self._promised[path] - nbytes)
