"""Filesystem side of receiving: every name checked, every write atomic, nothing outside the root.

Parent directories are created on demand and must be real directories (a symlink in
the way is refused, so a planted link cannot redirect a write). Files are written
under a temporary name in their final directory and renamed into place only after
the caller verified their bytes. A lander `in_place` (a workspace push: nothing reads
the workdir until the push is over) creates a small file straight under its name when
that name is free (O_EXCL, never through a link): one rename a file less, the cost of
tar's own landing. A file half written there when the agent dies is not verified, so
a resumed push sends it again, onto the temporary name and a rename (the name is taken).
A file is created with its final mode where the process's umask leaves that mode alone,
so it needs no `fchmod` (four syscalls a small file: open, write, futimens, close).
Directory modes keep owner rwx so a read-only directory in the tree cannot block its own
children from landing.

A `staged` lander (outputs pulled to the operator, which a person or a sink may look at
while they land) never shows a file before it is whole, yet pays no rename a file for it:
a directory the root does not hold yet is made inside a hidden staging directory (an
in-flight name under the root, same filesystem), its files are created straight under
their names there, and `publish` renames each such topmost new directory into place, one
rename for the whole subtree, once every file in it landed and verified. A directory the
root already holds (a repeated pull, a live sync's earlier landing) takes its files under
a temporary name and a rename as before. A pull killed before `publish` leaves only the
staging directory: hidden from every viewer (`is_in_flight`), removed by the next pull's
or sync's reconcile, never an output. Landing processes (landproc.py) given the stage's
name (`stage`) make their new directories in the same stage; the receiver that made it
adopts what they made (`adopt_new`) and publishes it. A landing process that died under a
batch may have left a file there half written: `drop_unverified` removes every file its
receiver did not verify before the stage is published.

Links are checked lexically as they land, but what a link means depends on the links
that land after it (`e -> d/d/../..` is harmless until `d -> .` arrives), so once a
transfer is over `drop_escaping_links` resolves every link in the root through the
others and removes each that resolves outside it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Container
from pathlib import Path

from agent.fdio import pwrite_all, write_all
from agent.inflight import in_flight_name, is_in_flight
from agent.transfer.errors import TransferError, UnsafePath
from agent.transfer.safety import check_link_target, check_relpath, link_stays_inside
from agent.transfer.zeros import all_zero

_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
SPARSE_BLOCK = 64 * 1024  # zero runs this long and aligned are left as holes
_PART_FLAGS = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def _split(path: str) -> tuple[str, str]:
    parent, _, name = path.rpartition("/")
    return parent, name


def _umask() -> int | None:
    """This process's umask, read without changing it (None where /proc does not say)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return None


class Lander:
    def __init__(
        self, root: Path, *, in_place: bool = False, staged: bool = False, stage: str | None = None
    ) -> None:
        """`in_place`: create small files straight under their names (a workspace push);
        `staged`: new directories land in a stage of this lander's, published at the end;
        `stage`: in this one instead, another process's, which publishes it."""
        self.root = str(root)
        # relative dir → (where it is, whether new files may be created there under their names)
        self._dirs: dict[str, tuple[str, bool]] = {"": (self.root, in_place)}
        self.made_links = False
        self.in_place = in_place
        self._umask = _umask()
        token = f"swjob-{secrets.token_hex(6)}"
        made = f"{self.root}/{in_flight_name('', token, 'tmp')}" if staged else None
        self.stage = stage or made
        self._owns_stage = stage is None
        self._new: set[str] = set()  # topmost dirs made in the stage, renamed in at `publish`

    def _abs(self, rel: str) -> str:
        parent, name = _split(rel)
        return f"{self._dir(parent)[0]}/{name}"

    def _dir(self, rel: str) -> tuple[str, bool]:
        """Where directory `rel` is, and whether files may be created there straight under
        their names; made with its parents as real directories if need be (symlinks on the
        way refused), a new one under a staged root inside the stage."""
        known = self._dirs.get(rel)
        if known is not None:
            return known
        parent, name = _split(rel)
        base, unseen = self._dir(parent)
        full = f"{base}/{name}"
        if self.stage is not None and not unseen:
            if _real_dir(full, rel, missing_ok=True):  # the root holds it: looked at once
                self._dirs[rel] = (full, False)
                return full, False
            full, unseen = f"{self.stage}/{rel}", True
            os.makedirs(f"{self.stage}/{parent}", 0o700, exist_ok=True)
            self._new.add(rel)
        try:
            os.mkdir(full)
        except FileExistsError:
            _real_dir(full, rel)
        self._dirs[rel] = (full, unseen)
        return full, unseen

    def publish(self) -> dict[str, str]:
        """Rename every new directory made in the stage into place and remove the stage;
        the directories that could not be placed (a hostile listing put something else at
        their name meanwhile), each with why. Call once nothing lands any more. A borrowed
        stage is left to its owner, which may still be landing in it."""
        if self.stage is None or not self._owns_stage:
            return {}
        refused = {}
        for rel in sorted(self._new):
            try:
                os.rename(f"{self.stage}/{rel}", f"{self.root}/{rel}")
            except OSError as exc:
                refused[rel] = f"cannot place {rel!r}: {exc.strerror}"
        shutil.rmtree(self.stage, ignore_errors=True)
        self._new.clear()
        self._dirs = {"": (self.root, self.in_place)}
        return refused

    def drop_unverified(self, verified: Container[str]) -> None:
        """Remove every file in the stage that is not in `verified` (nor in flight: hidden,
        removed by the next reconcile): a landing process that died under a batch may
        have left one half written, which publishing would put among the outputs. Links
        stay (checked as they landed, and again by `drop_escaping_links`)."""
        if self.stage is None:
            return
        for top, _dirs, files in os.walk(self.stage):
            rel_top = os.path.relpath(top, self.stage)
            for name in files:
                rel, full = f"{rel_top}/{name}".removeprefix("./"), os.path.join(top, name)
                if rel not in verified and not is_in_flight(name) and not os.path.islink(full):
                    os.unlink(full)

    def take_new(self) -> list[str]:
        """The topmost new directories made in the stage since the last call, handed over to
        the stage's owner (`adopt_new`) by a landing process, which never publishes."""
        new, self._new = sorted(self._new), set()
        return new

    def adopt_new(self, dirs: list[str]) -> None:
        """Publish, with this lander's own, the new directories another process made in
        this stage (each passes `check_relpath`: the other process is ours, the rule is not
        relaxed for it)."""
        self._new.update(check_relpath(rel) for rel in dirs)

    def make_dir(self, path: object, mode: int) -> None:
        rel = check_relpath(path)
        os.chmod(self._dir(rel)[0], (mode & 0o777) | 0o700)

    def make_link(self, path: object, target: object) -> None:
        rel = check_relpath(path)
        check_link_target(rel, target)
        tmp = self._tmp(rel, "tmp")
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(target, tmp)  # type: ignore[arg-type]
        self._rename(tmp, rel)
        self._dirs.pop(rel, None)
        self.made_links = True

    def drop_escaping_links(self) -> list[str]:
        """Remove every link under the root that resolves outside it, through the other
        links now there; one refusal line per link removed. Links are never followed."""
        refused = []
        for top, dirs, files in os.walk(self.root):
            for name in [*dirs, *files]:
                full = os.path.join(top, name)
                if not os.path.islink(full):
                    continue
                rel = os.path.relpath(full, self.root)
                target = os.readlink(full)
                if not link_stays_inside(self.root, rel, target):
                    os.unlink(full)
                    refused.append(f"{rel}: symlink to {target} resolves outside the landing dir")
        return refused

    def write_file(self, path: object, data: bytes | memoryview, mode: int, mtime_ns: int) -> None:
        """Write verified bytes under a temporary name, set mode and mtime, rename into place;
        where nobody looks yet (`in_place`, or a new directory of a staged lander) straight
        under its name if that is free."""
        self.write_checked(check_relpath(path), data, mode, mtime_ns)

    def write_checked(self, rel: str, data: bytes | memoryview, mode: int, mtime_ns: int) -> None:
        """`write_file` for a path the caller has already passed through `check_relpath`."""
        mode &= 0o777
        created = mode if self._umask is not None and not mode & self._umask else 0o600
        parent, name = _split(rel)
        where, unseen = self._dir(parent)
        if unseen:  # nobody looks here until the transfer is over: no temporary name
            full = f"{where}/{name}"
            try:
                fd = os.open(full, _NEW_FLAGS, created)
            except FileExistsError:
                pass  # taken (a resumed push, a held file linked in): replace it by rename
            else:
                self._fill(fd, full, data, mode if created != mode else None, mtime_ns)
                return
        tmp = self._tmp(rel, "tmp")
        fd = os.open(tmp, _WRITE_FLAGS, created)
        self._fill(fd, tmp, data, mode if created != mode else None, mtime_ns)
        self._rename(tmp, rel)

    @staticmethod
    def _fill(fd: int, name: str, data: bytes | memoryview, mode: int | None, mtime: int) -> None:
        """Write and seal a new file (`mode` None: it was created with its mode)."""
        try:
            write_all(fd, data)
            if mode is not None:
                os.fchmod(fd, mode)
            os.utime(fd, ns=(mtime, mtime))
        except BaseException:
            os.unlink(name)  # a full disk must not leave half a file behind
            raise
        finally:
            os.close(fd)

    def open_part(self, path: object, size: int) -> int:
        """A fresh `.part` file of `size` bytes for a chunked file; chunks land at offsets."""
        rel = check_relpath(path)
        fd = os.open(self._tmp(rel, "part"), _PART_FLAGS, 0o600)
        os.ftruncate(fd, size)
        return fd

    @staticmethod
    def write_at(fd: int, data: bytes, offset: int) -> int:
        """Write `data` at `offset`, seeking over zero runs so they stay holes (the `.part`
        file starts as one hole of its full size); the bytes really written. Each run of
        data between holes is one `pwrite` (few large writes, not one per block)."""
        written, view, run = 0, memoryview(data), 0
        for start in range(0, len(data) + SPARSE_BLOCK, SPARSE_BLOCK):
            end = min(start + SPARSE_BLOCK, len(data))
            if start < end and not all_zero(view[start:end]):
                continue  # this block joins the run of data before it
            if run < start:  # a hole (or the end) closes the run [run, start)
                written += pwrite_all(fd, view[run : min(start, len(data))], offset + run)
            run = end
        return written

    def finish_part(self, path: str, fd: int, mode: int, mtime_ns: int) -> None:
        self._seal(fd, mode, mtime_ns)
        self._rename(self._tmp(path, "part"), path)

    def discard_part(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp(path, "part"))

    def _tmp(self, rel: str, suffix: str) -> str:
        parent, name = _split(rel)
        return f"{self._dir(parent)[0]}/{in_flight_name('', name, suffix)}"

    @staticmethod
    def _seal(fd: int, mode: int, mtime_ns: int) -> None:
        os.fchmod(fd, mode & 0o777)
        os.utime(fd, ns=(mtime_ns, mtime_ns))

    def _rename(self, tmp: str, rel: str) -> None:
        try:
            os.rename(tmp, self._abs(rel))
        except OSError as exc:
            os.unlink(tmp)
            raise TransferError(f"cannot place {rel!r}: {exc.strerror}") from None


def _real_dir(full: str, rel: str, *, missing_ok: bool = False) -> bool:
    """Whether `full` is a real directory (False: absent, with `missing_ok`); anything
    else there, a symlink above all, is refused."""
    try:
        mode = os.lstat(full).st_mode
    except FileNotFoundError:
        if missing_ok:
            return False
        raise
    if not stat.S_ISDIR(mode):
        raise UnsafePath(f"refused {rel!r}: exists and is not a real directory")
    return True
