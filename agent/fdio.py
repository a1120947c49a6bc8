"""Whole buffers written by file descriptor.

`os.write` and `os.pwrite` may write less than asked (a signal, a nearly full disk, a
pipe); every writer that bypasses Python's buffered files — records written whole, log
lines that must never be half in a buffer, landed transfer bytes — needs the same loop.
"""

from __future__ import annotations

import os


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of `data` at the descriptor's position (one call when the kernel takes it
    whole, as it does a small file's bytes: no view, no loop)."""
    done = os.write(fd, data) if data else 0
    if done < len(data):
        view = memoryview(data)[done:]
        while view:
            view = view[os.write(fd, view) :]


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> int:
    """Write all of `data` at `offset`, leaving the position alone; returns its length."""
    view, done = memoryview(data), 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)
    return done
