"""Real small disks for tests: a tmpfs of a given size, and one filled to its last byte.

ENOSPC is the error a job that fills its node's disk causes; simulating it with a
mock would test the mock. Mounting needs root (these machines have it); without
it the tests that need a full disk are skipped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


class Disk:
    """A mounted tmpfs at `path`; `fill` takes every free byte, `free_up` gives them back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._ballast = path / "ballast.bin"

    def fill(self) -> None:
        with self._ballast.open("ab", buffering=0) as f:
            block = b"\0" * 65536
            while True:
                try:
                    if f.write(block) < len(block):
                        continue  # a short write: the next one meets ENOSPC
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    if len(block) == 1:
                        return
                    block = block[: len(block) // 2]

    def free_up(self) -> None:
        self._ballast.unlink(missing_ok=True)


@contextlib.contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Disk]:
    """A tmpfs of `size` (mount's syntax: "1m") at `mount`, created if needed, unmounted after;
    the test is skipped where mounting is not allowed."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "swjob-test", str(mount)], check=True
    )
    try:
        yield Disk(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Disk]:
    """A 1 MiB tmpfs under the test's tmp dir, unmounted afterwards."""
    with tmpfs(tmp_path / "disk", "1m") as disk:
        yield disk
