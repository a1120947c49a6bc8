"""The operator's files are private: only the operator's user may read them.

The run index holds each run's join token and the orchestrator's id, and a landing dir
holds the job's outputs; a local user who can read either can take a run over or read
its data. So the engine process runs under umask 077 (every file it creates is 0600,
every directory 0700, whatever the shell's umask), and a directory swjob keeps its
state in that an earlier version (or the user) left group/world-accessible is
tightened, with a one-line notice on stderr.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

from engine.errors import UnusableDirError

PRIVATE_UMASK = 0o077


def set_private_umask() -> None:
    """From now on this process (and the agents it starts) creates private files."""
    os.umask(PRIVATE_UMASK)


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner can enter: created 0700 (parents too), or
    tightened to 0700 when it exists with group/world bits (said on stderr, once)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.stat()
    except OSError as exc:  # a file in the way, a read-only disk: say which path, once
        problem = f"cannot keep swjob's files here: {exc.strerror or exc}"
        raise UnusableDirError(f"{path}: {problem}") from None
    mode = stat.S_IMODE(info.st_mode)
    if (owner := info.st_uid) != os.geteuid():  # its owner could read or plant keys
        problem = f"belongs to another user (uid {owner}); swjob keeps its files only in yours"
        raise UnusableDirError(f"{path}: {problem}")
    if mode & 0o077:
        os.chmod(path, 0o700)
        print(
            f"swjob: {path} was readable by other users (mode {mode:04o}); now 0700",
            file=sys.stderr,
        )
    return path


def foreign_dir(path: Path) -> str | None:
    """Why another local user could move or replace `path` or a directory above it —
    one they own (or their link), or one everyone may write that is not sticky — or None.
    Whatever swjob wrote below such a directory could be swapped for that user's own,
    and its next files (a run's outputs) land where they read. `path` need not exist:
    its existing ancestors are checked, as written and as links resolve them."""
    me = os.geteuid()
    for place, info in _existing(path, path.resolve()):
        if info.st_uid not in (me, 0):
            return f"{place}: belongs to another user (uid {info.st_uid})"
        shared = info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX
        if stat.S_ISDIR(info.st_mode) and shared:
            return f"{place}: writable by every user (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _existing(*paths: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Each existing one of `paths` and their ancestors, once (a path as written and as
    resolved mostly share them: every run's submit asks), with its lstat."""
    places = (p for path in map(Path.absolute, paths) for p in (path, *path.parents))
    for place in dict.fromkeys(places):
        try:
            yield place, place.lstat()
        except OSError:  # absent, or not to be looked into: as `lexists` says
            continue
