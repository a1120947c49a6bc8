"""What a warm node holds of the previous run's workspace, so a push sends only changes.

When a run ends on a kept node (agent/warm.py), its workdir is not deleted but moved
aside to `held/` (beside work/, outside the next job's workdir: the next job's room is
clean). The next push first asks what is held (`held_files`: path, size, mtime — the
operator's own mtime, which every landed file carries), and names the files of its tree
that match exactly; the node hard-links those into the fresh workdir (`adopt`) and the
push sends the rest. A file the previous job changed has a new mtime and is sent again;
a file the operator removed is simply not adopted. rsync's quick check, on stat alone,
so a 277 MB tree costs a listing, not a re-read. Before the run's first step starts,
whatever is still held goes (`release`): no process of the next run can read the previous
run's files or outputs there.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from agent.transfer.safety import UnsafePath, check_relpath

HELD = "held"
MAX_HELD = 1_000_000  # files listed at most: a bound on the answer, not a real limit


def held_dir(workdir: Path) -> Path:
    return workdir.parent / HELD


def keep(workdir: Path) -> None:
    """The run is over: its workdir becomes what the node holds (the previous hold goes)."""
    held = held_dir(workdir)
    shutil.rmtree(held, ignore_errors=True)
    if workdir.is_dir() and not workdir.is_symlink():
        os.rename(workdir, held)


def release(workdir: Path) -> None:
    """The run's first step starts: nothing of the previous run stays for its processes to
    find (the files the push reused live on, hard-linked, in the workdir)."""
    shutil.rmtree(held_dir(workdir), ignore_errors=True)


def held_files(workdir: Path) -> list[list[object]]:
    """[path, size, mtime_ns, mode] of every regular file held (links and the rest not)."""
    held = held_dir(workdir)
    rows: list[list[object]] = []
    for top, dirs, files in os.walk(held):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
        for name in files:
            full = os.path.join(top, name)
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode) and len(rows) < MAX_HELD:
                rel = os.path.relpath(full, held)
                rows.append([rel, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode) & 0o777])
    return rows


def adopt(workdir: Path, row: object) -> bool:
    """Link held `row`'s path into `workdir` when it is still the file the operator named
    ([path, size, mtime_ns, mode], a regular file); False when it is not (the push then
    sends it)."""
    if not isinstance(row, list) or len(row) != 4 or not all(isinstance(v, int) for v in row[1:]):
        return False
    path, size, mtime_ns, mode = row
    try:
        rel = check_relpath(path)
    except UnsafePath:
        return False
    src, dst = held_dir(workdir) / rel, workdir / rel
    try:
        st = os.lstat(src)
        found = (st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode) & 0o777)
        if not stat.S_ISREG(st.st_mode) or found != (size, mtime_ns, mode):
            return False
        _make_parents(workdir, rel)
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        return False
    return True


def _make_parents(workdir: Path, rel: str) -> None:
    """The directories of `rel` inside `workdir`, refusing any that is a link."""
    current = workdir
    for part in rel.split("/")[:-1]:
        current = current / part
        try:
            os.mkdir(current, 0o755)
        except FileExistsError:
            if os.path.islink(current) or not current.is_dir():
                raise NotADirectoryError(str(current)) from None
