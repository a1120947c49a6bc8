"""A closed terminal (SIGHUP) or a plain `kill` (SIGTERM) ends the console the way
Ctrl-C does: the runs it drives are stopped and their nodes torn down.

Python's default for both signals is to die on the spot, skipping the app's unmount,
so every node the console drove kept running — and billing — with no one told. Nobody
can be asked instead: the terminal may be gone.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

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
