"""Path rules both sides apply to every name they send or receive.

A transfer root is a jail: names are relative POSIX paths without `.`/`..`
components, NUL or line breaks; a symlink is kept only if its target stays inside
the root — lexically from the link's directory, and (`link_stays_inside`) resolved
component by component through the links actually in the tree, as the kernel would:
`ln -s . d; ln -s d/d/d/../../.. e` looks like `.` but is the root's grandparent.
Parent directories must be real directories (never symlinks), so a link planted in
the tree cannot redirect a later write. Special files (devices, fifos, sockets) are
never moved.
"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path

from agent.transfer.errors import UnsafePath

MAX_PATH = 4096
MAX_LINK_HOPS = 40  # the kernel's own limit: a longer chain is a loop, refused


def _bad_chars(text: str) -> bool:
    """NUL or a line break: no name may hold one (plain `in` tests: this runs several
    times for every file each side moves)."""
    return "\x00" in text or "\n" in text or "\r" in text


def check_relpath(path: object) -> str:
    """Return `path` if it is a safe relative name inside a root, else raise UnsafePath."""
    if not isinstance(path, str) or not path:
        raise UnsafePath(f"refused empty or non-text path {path!r}")
    if len(path) > MAX_PATH or _bad_chars(path):
        raise UnsafePath(f"refused path with NUL, line break or excessive length: {path!r}")
    if path[0] == "/":
        raise UnsafePath(f"refused absolute path {path!r}")
    wrapped = f"/{path}/"  # substring tests, no list of parts: this runs per file, per side
    if "//" in wrapped or "/./" in wrapped or "/../" in wrapped:
        raise UnsafePath(f"refused path with '..', '.' or empty component: {path!r}")
    return path


def check_link_target(path: str, target: object) -> str:
    """Return `target` if a link at `path` pointing to it stays inside the root."""
    if not isinstance(target, str) or not target:
        raise UnsafePath(f"refused symlink {path!r} with empty target")
    if _bad_chars(target) or target.startswith("/"):
        raise UnsafePath(f"refused symlink {path!r} -> {target!r}: target leaves the root")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if joined == ".." or joined.startswith("../"):
        raise UnsafePath(f"refused symlink {path!r} -> {target!r}: target leaves the root")
    return target


def link_stays_inside(root: Path | str, path: str, target: str) -> bool:
    """Whether the link at `path` (relative to `root`) pointing at `target` resolves
    inside `root`: each component looked at with lstat, each link met on the way
    expanded from its own directory (read, never followed), `..` never above the root."""
    position = path.split("/")[:-1]
    pending = list(reversed(target.split("/")))
    hops = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not position:
                return False
            position.pop()
            continue
        here = os.path.join(root, *position, part)
        try:
            is_link = stat.S_ISLNK(os.lstat(here).st_mode)
        except OSError:
            is_link = False  # not there (yet): a plain name, as the lexical check took it
        if not is_link:
            position.append(part)
            continue
        hops += 1
        inner = os.readlink(here)
        if hops > MAX_LINK_HOPS or inner.startswith("/"):
            return False
        pending.extend(reversed(inner.split("/")))
    return True


def check_link_resolves(root: Path | str, path: str, target: str) -> str:
    """Return `target` if the link resolves inside `root` through the tree's own links."""
    if not link_stays_inside(root, path, target):
        raise UnsafePath(f"refused symlink {path!r} -> {target!r}: resolves outside the root")
    return target


def special_kind(mode: int) -> str | None:
    """A human name for a file type we refuse to move, or None for file/dir/symlink."""
    for test, name in (
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return None


def check_parents(root: Path | str, path: str) -> None:
    """Raise UnsafePath if a parent of `path` under `root` is a symlink (or not a directory).

    Paths are joined as strings: the sender runs this for every file it reads, and
    building a `Path` per component cost more than the lstat calls themselves."""
    current = str(root)
    for part in path.split("/")[:-1]:
        current = f"{current}/{part}"
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(f"refused {path!r}: parent {part!r} is not a real directory")


_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Parents:
    """Opens many files under one root through descriptors of their parent directories.

    Each directory on the way is opened with O_NOFOLLOW relative to the one above it, so
    no link anywhere on the path is followed (a stronger guarantee than `check_parents`'
    lstat before the open, which a swap between the two could beat), and a file then
    costs one `openat`: no lstat of each parent, no walk of the whole path again. The
    descriptors of the last directory's path stay open for the next file, which in walk
    order is mostly in the same directory. One instance per thread; `close` when done.
    """

    def __init__(self, root: Path | str) -> None:
        self._root = str(root)
        self._open: list[tuple[str, int]] = []  # (relative dir, descriptor), root first

    def open(self, path: str) -> int:
        """A descriptor of the regular file `path`, opened without following any link;
        FileNotFoundError if it (or a parent) is gone, UnsafePath for anything else."""
        check_relpath(path)
        parent, _, name = path.rpartition("/")
        return os.open(name, _READ_FLAGS, dir_fd=self._dir(path, parent))

    def _dir(self, path: str, parent: str) -> int:
        if self._open and self._open[-1][0] == parent:
            return self._open[-1][1]
        if not self._open:
            self._open.append(("", os.open(self._root, os.O_RDONLY | os.O_DIRECTORY)))
        while len(self._open) > 1 and not parent.startswith(self._open[-1][0] + "/"):
            if parent == self._open[-1][0]:
                return self._open[-1][1]
            os.close(self._open.pop()[1])
        held = self._open[-1][0]
        for part in (parent[len(held) + 1 :] if held else parent).split("/") if parent else []:
            try:
                fd = os.open(part, _DIR_FLAGS, dir_fd=self._open[-1][1])
            except FileNotFoundError:
                raise
            except OSError:
                raise UnsafePath(
                    f"refused {path!r}: parent {part!r} is not a real directory"
                ) from None
            held = f"{held}/{part}" if held else part
            self._open.append((held, fd))
        return self._open[-1][1]

    def close(self) -> None:
        while self._open:
            os.close(self._open.pop()[1])


def open_for_read(root: Path | str, path: str) -> int:
    """Open a regular file inside `root` without following links anywhere on the way."""
    check_relpath(path)
    check_parents(root, path)
    # O_NONBLOCK: a fifo put where a file was must not block the open waiting for a writer
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    fd = os.open(f"{root}/{path}", flags)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePath(f"refused {path!r}: not a regular file")
    return fd
