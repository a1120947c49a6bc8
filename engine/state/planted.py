"""A state file swjob did not make: refused in one line naming it, never opened through.

The state dir is the operator's own (0700, engine/state/private.py), but any program of
theirs may leave something at a name swjob uses: a symbolic link (swjob's writes would
land wherever it points), a fifo (sqlite's open fails with "disk I/O error", which names
nothing, and a slot file's read with "Illegal seek"), a directory. swjob makes regular
files only, so anything else at one of its names is refused before it is opened.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agent.transfer.safety import special_kind
from engine.state.locked import StateNotWritten


class Planted(StateNotWritten, OSError):
    """Something at one of swjob's names that swjob did not make. A StateNotWritten (one
    line naming it, for whoever says a state file's trouble) and an OSError (for whoever
    already copes with a lock file that cannot be made: a full disk)."""


SQLITE_SIDECARS = ("", "-wal", "-shm", "-journal")  # the files sqlite keeps next to a db


def planted(mode: int) -> str | None:
    """What a file of `mode` is when it is not a regular file (None when it is)."""
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISDIR(mode):
        return "directory"
    return special_kind(mode)


def refuse_planted(path: Path, suffixes: tuple[str, ...] = ("",)) -> None:
    """Raise Planted when `path` (or `path` + a suffix: a database's sidecars)
    exists as anything but a regular file. An absent one is fine: swjob makes it."""
    for suffix in suffixes:
        name = path.with_name(path.name + suffix)
        try:
            kind = planted(os.lstat(name).st_mode)
        except OSError:
            continue  # absent, or unreadable: the open says which
        if kind is not None:
            raise Planted(f"{name}: a {kind}, not a file swjob made; move it away")


def own_subdir(path: Path) -> Path:
    """`path`, a directory swjob keeps in its state dir, made 0700 if absent; raises
    Planted when something else is there (a file, a link to a directory
    elsewhere: its lock files would be made wherever it points)."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
    except FileExistsError:
        pass  # not a directory: said below
    except OSError as exc:
        raise Planted(f"{path}: {exc.strerror or exc}") from None
    mode = os.lstat(path).st_mode
    if not stat.S_ISDIR(mode):
        kind = planted(mode) or "file"
        raise Planted(f"{path}: a {kind}, not a directory swjob made; move it away")
    return path
