"""End a process at once, once everything it owes the world is written and closed.

An interpreter that has imported pydantic, iroh, asyncio and our ~100 modules spends
0.1–0.15 s on its way out freeing them object by object (seen with strace: CPU only,
no system call). Nobody waits for that in most programs, but the operator waits for
the local agent's exit in every teardown, and the user waits for `swjob run`'s: the
smallest job paid it twice. A caller uses this only when its own cleanup is done
(files closed, children ended, threads with nothing left to do), so what is skipped
is only that freeing, and the at-exit hooks of libraries we never rely on.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Flush the standard streams, then end the process with `code`. (Our log handlers,
    stream and file, write each record through as it is logged.)"""
    for stream in (sys.stdout, sys.stderr):
        # a reader gone away, a stream already closed: nothing more can be said there
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
