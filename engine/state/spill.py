"""Index rows an engine could not write before it ended, kept as files beside the index.

Another process may hold runs.sqlite's write lock past a closing engine's last try
(engine/state/indexwrites.py). The rows it kept in memory would die with it, and a run
left running (`l` at the console's quit) whose row never got in would be known to no
later swjob: nobody would adopt it, and its node would bill until its orphan timeout.
So they are written here, one file per run (`unindexed/<run id>.json`, private like the
index: they hold the same join tokens), and the next process that opens the index writes
them in (engine/state/store.py), each under the run's lease. The lease alone does not
make a file the run's latest state: the index may have been held when an adopter took
the run, which then drove it on and wrote newer rows (or its end) once the lock went. So
an adopter carries a run on from its kept row when that is newer than the index's, a
file older than the index's row (or of a run it shows ended) is dropped unapplied, and
while the index is still held the console and `swjob attach` adopt a run from its file.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from engine.state.wholefile import replace_whole

log = logging.getLogger("swjob.engine")

DIR = "unindexed"
SUFFIX = ".json"


def folder(index: Path) -> Path:
    return index.parent / DIR


def keep(index: Path, rows: dict[str, str]) -> Path:
    """Write each run's row (its JSON text) to its file, whole or not at all (a temp
    file renamed over it); returns the folder."""
    where = folder(index)
    where.mkdir(mode=0o700, exist_ok=True)
    os.chmod(where, 0o700)  # made with other users' bits (by hand, or an older umask)
    for run_id, text in rows.items():
        replace_whole(where / f"{run_id}{SUFFIX}", text, temp=where / f".{run_id}.tmp")
    return where


def kept(index: Path) -> list[str]:
    """The runs with a row kept here (none when the folder does not exist)."""
    try:
        names = os.listdir(folder(index))
    except OSError:
        return []
    return sorted(n.removesuffix(SUFFIX) for n in names if n.endswith(SUFFIX) and n[0] != ".")


MAX_BYTES = 16 << 20
"""A row is a run's summary and recovery facts: kilobytes. A bigger file is not ours."""


class Unreadable(ValueError):
    """The file is not a row this module wrote: left as it is, said."""


def read(index: Path, run_id: str) -> str | None:
    """The run's kept row; None once it has been written in (its file removed). Every
    swjob command opens the index, so whatever lies here must not crash or hang it: a
    symlink (never ours), a fifo (opening it waited for a writer), a directory, a file
    too big to be a row or not UTF-8 raise Unreadable, as does one that cannot be read."""
    path = folder(index) / f"{run_id}{SUFFIX}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unreadable(exc.strerror or str(exc)) from None
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_size > MAX_BYTES:
        os.close(fd)
        raise Unreadable(f"not a regular file of at most {MAX_BYTES} bytes")
    with os.fdopen(fd, "rb") as kept:
        try:
            return kept.read(MAX_BYTES + 1).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise Unreadable(str(exc)) from None


def remove(index: Path, run_id: str) -> None:
    """The file goes once its row is in (or stale). One that cannot go (its folder made
    read-only) is said and left: written in again later, it changes nothing, and raised
    it ended every swjob command, each opening the index, in a traceback."""
    try:
        (folder(index) / f"{run_id}{SUFFIX}").unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("%s: written in, but cannot be removed: %s", exc.filename, exc.strerror)
