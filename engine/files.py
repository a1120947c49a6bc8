"""Files swjob opens at names of its own: only ever the regular files it made.

A program of the operator's may leave something else at one of those names: a symbolic
link (what swjob writes would land wherever it points), a fifo (an open or a read waits
for a writer for good: a run's events.jsonl swapped for one hung `swjob attach`), a
directory. Such a file is refused before it is read or written, in one line naming it.
Below every engine room: the report room (a run's event log) uses it as the state room
does (engine/state/planted.py).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agent.transfer.safety import special_kind
from engine.errors import UnusableDirError


class NotMade(UnusableDirError, OSError):
    """Something at one of swjob's names that swjob did not make: one line naming it, for
    whoever says a file's trouble (UnusableDirError), and an OSError for whoever already
    copes with a file that cannot be opened (a full disk)."""


def kind_of(mode: int) -> str | None:
    """What a file of `mode` is when it is not a regular file (None when it is)."""
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISDIR(mode):
        return "directory"
    return special_kind(mode)


def refusal(path: Path, kind: str, made: str = "a file") -> str:
    """The one line that refuses `path`: what is there, and what the user can do."""
    return f"{path}: a {kind}, not {made} swjob made; move it away"


def open_regular(path: Path, flags: int, mode: int = 0o600) -> int:
    """`path` opened with `flags`, only if it is a regular file (or absent and created):
    never through a link, never a fifo. Raises NotMade for anything else there."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError:
        kind = kind_of(os.lstat(path).st_mode) if os.path.lexists(path) else None
        if kind is None:
            raise
        raise NotMade(refusal(path, kind)) from None
    kind = kind_of(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise NotMade(refusal(path, kind))
    return fd
