"""A long transfer's batches of small files landed in helper processes, not in threads.

A small file costs four syscalls to land (open, write, futimens, close) and CPython
releases the GIL around each. With the agent's writer threads all landing at once, every
one of those releases handed the GIL to another thread and took it back: landing a
captured push of 100,000 1 KiB files in-process on a journaled ext4 made 1.17 million
`futex` calls with four writer threads (1.5 s user + 5.3 s system) against 3,300 with
one (1.0 + 2.6 s, `tar -x` 0.1 + 2.5 s), which in turn lands on one core only. A process
has a GIL of its own: `LANDERS` single-threaded landers work on as many cores with no
hand-over, and the agent only passes them whole batch bodies and records what landed.
The operator lands a pull's batches the same way, in landers of its own: there the
threads shared the GIL with the engine's loop and the console besides.

A lander (agent/transfer/landserve.py) runs the receiver's own code on each batch
(`Receiver._apply_job`: every name checked, no link followed, nothing outside the root,
each file's SHA-256 verified), with one receiver per agent-side receiver (`token`), so
what it knows of a push's directories is never carried into another push. It answers
with the files that landed and verified, those that did not, whether it made a link, the
new directories it made in a pull's stage (published by the receiver that made the
stage, once all landed), and the error that ended the batch, if one did; the caller
records the files before the batch's caller hears of it, so a transfer cancelled
meanwhile still knows what landed (resume sends only the rest). A pull's lander checks
each small file's room on the disk as the operator would (agent/transfer/space.py); each
lander holds its own promises, so those landing at once may count the same free bytes
twice, by at most the batch each is landing (4 MiB): the check is there so the disk is
not filled to its last byte, and the free space each one asks of the filesystem already
counts what the others wrote.

A lander reads requests on stdin and answers on stdout; it ends when its parent closes
its end of the pipe: after `IDLE_S` without a batch (a push is over: the agent keeps no
process beside a step's), or when the parent exits. Its environment holds only what
Python and the file names' encoding need (`_ENV_KEPT`): neither a node's secrets nor
the operator's provider keys. The next push starts landers again
(`warm`, as its second batch comes: a push of one batch starts none). One that died is
replaced on the next batch; the batches it held fail with a TransferError, and the push
is retried by the operator.
"""

from __future__ import annotations

import contextlib
import fcntl
import marshal
import os
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

from agent.fdio import write_all
from agent.ownpython import own_python
from agent.transfer.errors import TransferError, UnsafePath, WireError

LANDERS = 4  # at most; one a core
IDLE_S = 10.0  # a lander unused this long ends (one is started again for the next push)
_GRACE_S = 2.0
REQUEST = struct.Struct(">QBBIII")  # token, batch kind, flags, root, stage and body lengths
IN_PLACE, PER_FILE = 1, 2  # REQUEST's flags
ANSWER = struct.Struct(">I")
_PIPE_SIZE = 1 << 20  # a 4 MiB batch crosses in 4 wake-ups, not 64 (F_SETPIPE_SZ)
_START = "import agent.transfer.landserve as m;m.serve()"
_ERRORS: dict[str, type[Exception]] = {
    "UnsafePath": UnsafePath,
    "WireError": WireError,
    "TransferError": TransferError,
}
Took = Callable[[list[tuple[str, int, int, str]], list[tuple[str, str]], bool, list[str]], None]
Done = tuple[int, int, str | None]  # file bytes, whole files, the last path
_ENV_KEPT = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONUTF8", "SYSTEMROOT")


class Where(NamedTuple):
    """Which receiver a batch belongs to (`token`, its caller's) and how it lands there."""

    token: int
    root: str
    in_place: bool
    per_file: bool
    stage: str | None


def _env() -> dict[str, str]:
    """What a lander keeps of its parent's environment: the locale (file names are encoded
    by it) and Python's own settings, nothing else (no secret of the node or operator)."""
    return {k: v for k, v in os.environ.items() if k in _ENV_KEPT or k.startswith("LC_")}


def error_of(name: str, message: str) -> Exception:
    """The exception a lander reported, as its own class where the transfer knows it."""
    kind = _ERRORS.get(name)
    if kind is None:
        return TransferError(f"landing process error: {name}: {message}")
    return kind(message)


class _Lander:
    """One landing process and the thread that talks to it (one batch at a time)."""

    def __init__(self) -> None:
        self.popen = subprocess.Popen(
            own_python(_START),
            env=_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # its last words (its errors come back in its answers) go to the agent's log or
            # a redirected stderr, never into the console's terminal, which Textual draws on
            stderr=subprocess.DEVNULL if os.isatty(2) else None,
            bufsize=0,
            cwd="/",
        )
        for pipe in (self.popen.stdin, self.popen.stdout):
            with contextlib.suppress(OSError):  # F_SETPIPE_SZ, Linux only
                fcntl.fcntl(pipe.fileno(), 1031, _PIPE_SIZE)  # type: ignore[union-attr]
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="swjob-lander")
        self.queued = 0
        self.dead = False
        self.idle_since = time.monotonic()
        self.timer: threading.Timer | None = None

    def land(self, request: bytes, body: bytes, took: Took) -> Done:
        """Send one batch, wait for its answer, hand what landed to `took` (in this thread)."""
        try:
            write_all(self.popen.stdin.fileno(), request)  # type: ignore[union-attr]
            write_all(self.popen.stdin.fileno(), body)  # type: ignore[union-attr]
            fd = self.popen.stdout.fileno()  # type: ignore[union-attr]
            (size,) = ANSWER.unpack(_read_exact(fd, ANSWER.size))
            answer = marshal.loads(_read_exact(fd, size))
        except (OSError, ValueError, EOFError) as exc:
            self.dead = True
            raise TransferError(f"the landing process failed: {exc}") from None
        nbytes, files, current, landed, failed, made_links, new, error = answer
        took(landed, failed, made_links, new)
        if error is not None:
            raise error_of(*error)
        return nbytes, files, current

    def retire(self) -> None:
        """End this lander (our own child, by its handle: its stdin closed, killed if it
        does not go) and reap it; batches still queued on its thread fail on its pipe."""
        self.dead = True
        if self.popen.poll() is None and self.queued == 0:
            self.popen.stdin.close()  # type: ignore[union-attr]  # idle: it ends by itself
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=_GRACE_S)
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()
        self.thread.shutdown(wait=False)


def _read_exact(fd: int, size: int) -> bytes:
    """`size` bytes from `fd`; OSError if it ends first (the other side died)."""
    out = bytearray()
    while len(out) < size:
        piece = os.read(fd, size - len(out))
        if not piece:
            raise OSError("the pipe ended")
        out += piece
    return bytes(out)


_pool: list[_Lander] = []
_pool_lock = threading.Lock()


def warm() -> None:
    """Start the landers now (they take ~0.2 s of CPU to start), not under a batch: a push
    calls this (off its loop) as its second batch comes, and lands its next ones here once
    they have started (receiver.py, `landers_after`)."""
    with _pool_lock:
        _fill()


def _fill() -> None:
    """Replace dead landers and start the missing ones (holding `_pool_lock`)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    for each in [each for each in _pool if each.dead or each.popen.poll() is not None]:
        _pool.remove(each)
        each.retire()
    while len(_pool) < min(LANDERS, cores or 1):
        _pool.append(_Lander())
        _arm(_pool[-1])  # started ahead of a push that may never come


def _pick() -> _Lander:
    """The lander with the fewest batches queued (dead ones replaced)."""
    with _pool_lock:
        _fill()
        lander = min(_pool, key=lambda each: each.queued)
        lander.queued += 1
    return lander


def submit(where: Where, kind: int, body: bytes, took: Took) -> Future[Done]:
    """Land batch `body` (of frame kind `kind`) as `where` says in a lander; `took` gets the
    files that landed, those that did not, whether a link was made and the new directories
    made in the stage, before the future is done."""
    root, stage = os.fsencode(where.root), os.fsencode(where.stage or "")
    flags = IN_PLACE * where.in_place | PER_FILE * where.per_file
    request = REQUEST.pack(where.token, kind, flags, len(root), len(stage), len(body))
    request += root + stage
    lander = _pick()
    try:
        future = lander.thread.submit(lander.land, request, body, took)
    except RuntimeError:  # it died, and was retired, since it was picked
        _done(lander)
        raise TransferError("the landing process failed: it ended") from None
    future.add_done_callback(lambda _: _done(lander))
    return future


def _done(lander: _Lander) -> None:
    with _pool_lock:
        lander.queued -= 1
        if lander.queued == 0:
            lander.idle_since = time.monotonic()
            _arm(lander)


def _arm(lander: _Lander, after: float | None = None) -> None:
    """Look again at `lander` once it may have been idle for `IDLE_S` (holding the lock)."""
    if lander.timer is None:
        lander.timer = threading.Timer(
            IDLE_S if after is None else after, _retire_if_idle, (lander,)
        )
        lander.timer.daemon = True
        lander.timer.start()


def _retire_if_idle(lander: _Lander) -> None:
    """End a lander idle for `IDLE_S`: once a push is over, the agent has no process of its
    own beside a step's. Under the lock, so no batch is handed to it meanwhile."""
    with _pool_lock:
        lander.timer = None
        if lander not in _pool or lander.queued:
            return
        left = IDLE_S - (time.monotonic() - lander.idle_since)
        if left > 0:
            _arm(lander, left)
            return
        _pool.remove(lander)
        lander.retire()


def pids() -> list[int]:
    """The landers' process ids: the agent's own children, which no step's sweep may end."""
    with _pool_lock:
        return [lander.popen.pid for lander in _pool if not lander.dead]


def _forget_after_fork() -> None:
    """A forked child has none of the threads and must not write into the landers' pipes."""
    global _pool_lock
    _pool.clear()
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
