"""The landing dir follows the node's outputs exactly: what the job deleted, or replaced by
another kind of thing, since a live sync landed it goes before anything new lands.

Live sync (engine/run/livesync.py) lands outputs while the job runs; the job may then
delete one, or turn a file into a directory (or the other way round). Landed over, a
directory where a file now is refused the new files ("exists and is not a real
directory": the transfer failed and an exit-0 run ended FAILED), a file where a
directory now is stayed put (the new file never landed), and a deleted output stayed
in `outputs/`, outside manifest.json, and was carried into the next attempt. So each
sync and the final pull first remove from the landing dir every path the node's listing
does not hold as the same kind of thing; then `outputs/` is what the job has, the manifest
lists what is there, and a next attempt starts from exactly the last synced state.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

from agent.inflight import is_in_flight
from agent.transfer.walk import Entry


def reconcile(landing: Path, entries: list[Entry]) -> list[str]:
    """Remove from `landing` every path `entries` (the node's listing) does not hold as
    the same kind; the paths removed (files being landed by an earlier, cut pull are
    removed too, unnamed). Links are removed, never followed."""
    want: dict[str, str] = {}
    for entry in entries:
        want[entry.path] = entry.kind
        parent = entry.path
        while "/" in parent:
            parent = parent.rsplit("/", 1)[0]
            want.setdefault(parent, "dir")
    removed: list[str] = []
    if landing.is_dir() and not landing.is_symlink():
        _prune(landing, "", want, removed)
    return removed


def _prune(root: Path, rel: str, want: dict[str, str], removed: list[str]) -> None:
    try:
        names = sorted(os.listdir(root / rel if rel else root))
    except OSError:
        return
    for name in names:
        path = f"{rel}/{name}" if rel else name
        kind = _kind(root / path)
        if want.get(path) == kind:
            if kind == "dir":
                _prune(root, path, want, removed)
            continue
        _remove(root / path, kind)
        if not is_in_flight(name):
            removed.append(path)


def _kind(path: Path) -> str | None:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else None


def _remove(path: Path, kind: str | None) -> None:
    with contextlib.suppress(OSError):  # what cannot go is refused when its new self lands
        if kind == "dir":
            shutil.rmtree(path)
        else:
            path.unlink()
