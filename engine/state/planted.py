"""A state file swjob did not make: refused in one line naming it, never opened through.

The state dir is the operator's own (0700, engine/state/private.py), but any program of
theirs may leave something at a name swjob uses (engine/files.py): a fifo at runs.sqlite
failed sqlite's open with "disk I/O error", which names nothing, and one at a slot file
its read with "Illegal seek". swjob makes regular files only, so anything else at one of
its names is refused before it is opened.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from engine.files import NotMade, kind_of, refusal
from engine.state.locked import StateNotWritten


class Planted(StateNotWritten, NotMade):
    """A state file not made by swjob: a StateNotWritten as well, so that whoever copes
    with a state file that cannot be written (the ledger's writers) copes with it too."""


SQLITE_SIDECARS = ("", "-wal", "-shm", "-journal")  # the files sqlite keeps next to a db


def refuse_planted(path: Path, suffixes: tuple[str, ...] = ("",)) -> None:
    """Raise Planted when `path` (or `path` + a suffix: a database's sidecars) exists as
    anything but a regular file. An absent one is fine: swjob makes it."""
    for suffix in suffixes:
        name = path.with_name(path.name + suffix)
        try:
            kind = kind_of(os.lstat(name).st_mode)
        except OSError:
            continue  # absent, or unreadable: the open says which
        if kind is not None:
            raise Planted(refusal(name, kind))


def own_subdir(path: Path) -> Path:
    """`path`, a directory swjob keeps in its state dir, made 0700 if absent; raises
    Planted when something else is there (a file, a link to a directory elsewhere: its
    lock files would be made wherever it points)."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
    except FileExistsError:
        pass  # not a directory: said below
    except OSError as exc:
        raise Planted(f"{path}: {exc.strerror or exc}") from None
    mode = os.lstat(path).st_mode
    if not stat.S_ISDIR(mode):
        raise Planted(refusal(path, kind_of(mode) or "file", "a directory"))
    return path
