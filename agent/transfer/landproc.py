"""A long transfer's batches of small files landed in helper processes, not in threads.

A small file costs four syscalls to land (open, write, futimens, close) and CPython
releases the GIL around each. With the agent's writer threads all landing at once, every
one of those releases handed the GIL to another thread and took it back: landing a
captured push of 100,000 1 KiB files in-process on a journaled ext4 made 1.17 million
`futex` calls with four writer threads (1.5 s user + 5.3 s system) against 3,300 with
one (1.0 + 2.6 s, `tar -x` 0.1 + 2.5 s), which in turn lands on one core only. A process
has a GIL of its own: `LANDERS` single-threaded landers work on as many cores with no
hand-over, and the receiving side only passes them whole batch bodies and records what
landed: the agent for a push, the operator for a pull (where the threads also shared the
GIL with the engine's loop and the console).

A lander (agent/transfer/landserve.py) runs the receiver's own code on each batch
(`Receiver._apply_job`: every name checked, no link followed, nothing outside the root,
each file's SHA-256 verified), with one receiver per calling receiver (`token`), so what
it knows of one transfer's directories is never carried into another. It answers with
the files that landed and verified, those that did not, whether it made a link, the new
directories it made in a pull's stage (published by the receiver that made the stage,
once all landed), and the error that ended the batch, if one did. The caller records the
files before the batch's future is done, so a transfer cancelled meanwhile still knows
what landed (resume sends only the rest). A pull's lander checks each small file's room
on the disk as the operator would (agent/transfer/space.py), counting what the
operator's own guard has promised (`Where.reserve`: its chunked files, the batches in its
threads); landers landing at once may count the same free bytes twice, by at most the
batch each holds (4 MiB), and the free space each asks the filesystem for already counts
what the others wrote.

A lander reads requests on stdin and answers on stdout, after one byte that says it has
started (`warm` waits for it: a lander that cannot even import leaves the transfer in
its threads). It runs in a session of its own, so a signal to its parent's process
group (a terminal closed, a Ctrl-C, `kill -TERM -PGID`) does not end it under a batch;
it ends when its parent closes its end of the pipe: after `IDLE_S` without a batch (the
agent keeps no process of its own beside a step's once a push is over), or when the
parent exits. Its environment holds only what Python and the file names' encoding need
(`_ENV_KEPT`): neither a node's secrets nor the operator's provider keys. The next long
transfer starts landers again (`warm`, as its second batch comes: one of a batch or two
starts none). One that died is replaced on the next batch; the batches it held fail with
`Lost` (the caller retries the transfer, and a staged receiver drops what such a batch
may have left half written: receiver.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import marshal
import os
import select
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
READY_S = 30.0  # the longest `warm` waits for a lander's start (~0.2 s idle, ~1 s loaded)
READY = b"R"  # what a lander says once it has started
REQUEST = struct.Struct(">QQBBIII")  # token, reserve, kind, flags, root, stage, body lengths
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
_ENV_KEPT = frozenset(
    {"PATH", "HOME", "TZ", "TMPDIR", "SYSTEMROOT", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE"}
    | {"PYTHONUTF8", "PYTHONIOENCODING", "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE"}
    | {"PYTHONNOUSERSITE"}
)


class Where(NamedTuple):
    """Which receiver a batch belongs to (`token`, its caller's) and how it lands there;
    `reserve`: bytes the caller's own space guard has promised to files landing beside."""

    token: int
    root: str
    in_place: bool
    per_file: bool
    stage: str | None
    reserve: int = 0


class Lost(TransferError):
    """The lander died under the batch: what it landed of it is unknown."""


def _env() -> dict[str, str]:
    """What a lander keeps of its parent's environment: the locale (file names are encoded
    by it) and what decides which Python it runs and what it imports, nothing else (no
    secret of the node or operator)."""
    return {k: v for k, v in os.environ.items() if k in _ENV_KEPT}


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
            start_new_session=True,
        )
        for pipe in (self.popen.stdin, self.popen.stdout):
            with contextlib.suppress(OSError):  # F_SETPIPE_SZ, Linux only
                fcntl.fcntl(pipe.fileno(), 1031, _PIPE_SIZE)  # type: ignore[union-attr]
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="swjob-lander")
        self.queued = 0
        self.dead = False
        self.idle_since = time.monotonic()
        self.timer: threading.Timer | None = None
        self._started = False
        self._starting = threading.Lock()

    def started(self, timeout: float | None = None) -> None:
        """Wait (at most `timeout`) for the lander to say it has started; Lost if it ended
        first (it could not import: the cause is on its stderr) or took longer."""
        with self._starting:
            if self._started:
                return
            fd = self.popen.stdout.fileno()  # type: ignore[union-attr]
            if timeout is not None and not select.select([fd], [], [], timeout)[0]:
                self.dead = True
                raise Lost(f"the landing process did not start within {timeout:g} s")
            if os.read(fd, len(READY)) != READY:
                self.dead = True
                raise Lost("the landing process ended as it started")
            self._started = True

    def land(self, request: bytes, body: bytes, took: Took) -> Done:
        """Send one batch, wait for its answer, hand what landed to `took` (in this thread)."""
        self.started()
        try:
            write_all(self.popen.stdin.fileno(), request)  # type: ignore[union-attr]
            write_all(self.popen.stdin.fileno(), body)  # type: ignore[union-attr]
            fd = self.popen.stdout.fileno()  # type: ignore[union-attr]
            (size,) = ANSWER.unpack(_read_exact(fd, ANSWER.size))
            answer = marshal.loads(_read_exact(fd, size))
        except (OSError, ValueError, EOFError) as exc:
            self.dead = True
            raise Lost(f"the landing process failed: {exc}") from None
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
    """Start the landers now (they take ~0.2 s of CPU to start), not under a batch, and
    wait until they have: a long transfer calls this (off its loop) as its second batch
    comes, and lands its next ones here once they have started (receiver.py,
    `landers_after`); Lost if one cannot start, and the transfer stays in its threads."""
    with _pool_lock:
        _fill()
        landers = list(_pool)
    for lander in landers:  # not under the lock: a batch may be handed to another meanwhile
        lander.started(READY_S)


def _fill() -> None:
    """Replace dead landers and start the missing ones (holding `_pool_lock`). The dead are
    ended and reaped on a thread of their own: this may run on the caller's event loop."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    dead = [each for each in _pool if each.dead or each.popen.poll() is not None]
    for each in dead:
        _pool.remove(each)
    if dead:
        threading.Thread(target=_retire_all, args=(dead,), daemon=True).start()
    while len(_pool) < min(LANDERS, cores or 1):
        _pool.append(_Lander())
        _arm(_pool[-1])  # started ahead of a transfer that may never come


def _retire_all(landers: list[_Lander]) -> None:
    for lander in landers:
        lander.retire()


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
    sizes = (len(root), len(stage), len(body))
    request = REQUEST.pack(where.token, where.reserve, kind, flags, *sizes) + root + stage
    lander = _pick()
    try:
        future = lander.thread.submit(lander.land, request, body, took)
    except RuntimeError:  # it died, and was retired, since it was picked
        _done(lander)
        raise Lost("the landing process failed: it ended") from None
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
    own beside a step's. Taken out of the pool under the lock, so no batch is handed to it
    meanwhile; ended after, so no pick waits for it to go."""
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
    """The landers' process ids: this process's own children (on the node, no step's sweep
    may end them)."""
    with _pool_lock:
        return [lander.popen.pid for lander in _pool if not lander.dead]


def _forget_after_fork() -> None:
    """A forked child has none of the threads and must not write into the landers' pipes."""
    global _pool_lock
    _pool.clear()
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
