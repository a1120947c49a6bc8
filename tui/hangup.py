"""A closed terminal (SIGHUP) or a plain `kill` (SIGTERM) ends the console the way
Ctrl-C does: the runs it drives are stopped and their nodes torn down.

Python's default for both signals is to die on the spot, skipping the app's unmount,
so every node the console drove kept running — and billing — with no one told. Nobody
can be asked instead: the terminal may be gone. Once it is, its pty answers every write
with EIO, which ended Textual's writer thread; the driver's last write then waited on
that thread's full queue forever, and the runs were never stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from typing import Any, TextIO

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def install(leave: Callable[[], None]) -> Callable[[], None]:
    """On SIGTERM or SIGHUP call `leave` (whose way out must stop the runs); returns
    what removes the handlers again."""
    loop = asyncio.get_running_loop()
    for sig in SIGNALS:
        loop.add_signal_handler(sig, leave)

    def remove() -> None:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)

    return remove


class _Tolerant:
    """The terminal stream, dropping what a closed terminal refuses."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError):
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def tolerate_closed_terminal() -> None:
    """Textual draws on `sys.__stderr__`: wrap it before the app starts."""
    if sys.__stderr__ is not None:
        sys.__stderr__ = _Tolerant(sys.__stderr__)  # type: ignore[misc]
