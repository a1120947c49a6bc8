"""An interactive shell on the node: a PTY, the job's workdir and environment.

The shell is a session leader with the PTY as its controlling terminal, so the
terminal's own line discipline does what a local one does: Ctrl-C arrives as a byte
and becomes SIGINT for whatever runs in the foreground, a resize becomes SIGWINCH.
It starts through a two-line Python helper that takes the terminal (TIOCSCTTY) and
execs the shell: a `preexec_fn` would run Python in a forked child of a process full
of iroh's threads. When the shell exits, whatever it left in its process group is
stopped, its exit status (128+N for signal N) goes back as the last frame.

Frames both ways are `kind (1 byte) | length (4 bytes) | payload`: DATA carries
terminal bytes, RESIZE `cols, rows` (2 × u16), EXIT the status (i32).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import shutil
import signal
import struct
import subprocess
import sys
import termios
from enum import IntEnum
from pathlib import Path

from agent import procgroup
from agent.credentials import scrubbed
from agent.livewire import LiveError, LiveOk, Reader, SendStream, ShellOpen, encode_msg, refuse

HEADER = struct.Struct(">BI")
SIZE = struct.Struct(">HH")
STATUS = struct.Struct(">i")
MAX_FRAME = 1 << 20
READ_CHUNK = 64 * 1024
DRAIN_S = 1.0  # after the shell exits, how long its last output may take to arrive
HANGUP_GRACE_S = 1.0
_TAKE_TTY = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


_SESSIONS: set[int] = set()  # pids of the shells open now


def session_pids() -> set[int]:
    """The open shells: a step's end sweeps the agent's descendants (agent/subreaper.py),
    and an operator's shell is not the step's leftover."""
    return set(_SESSIONS)


class Kind(IntEnum):
    DATA = 0
    RESIZE = 1
    EXIT = 2


def frame(kind: Kind, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


async def read_frame(reader: Reader) -> tuple[Kind, bytes] | None:
    """The next frame, or None at a clean end of the stream."""
    head = await reader.exactly(HEADER.size)
    if head is None:
        return None
    kind, size = HEADER.unpack(head)
    if size > MAX_FRAME or kind not in Kind._value2member_map_:
        raise LiveError(f"bad shell frame (kind {kind}, {size} bytes)")
    body = await reader.exactly(size) if size else b""
    if body is None:
        raise LiveError("stream ended inside a shell frame")
    return Kind(kind), body


def set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def shell_program() -> str:
    """The node's login shell if it names one, else bash, else sh (every image has sh)."""
    for candidate in (os.environ.get("SHELL"), "/bin/bash", "/bin/sh"):
        if candidate and shutil.which(candidate):
            return candidate
    return "/bin/sh"


def _spawn(request: ShellOpen, workdir: Path, slave: int) -> subprocess.Popen[bytes]:
    """The shell, started without giving up the loop: a step ending meanwhile sweeps
    every child of the agent not in `session_pids()` (agent/subreaper.py), and asyncio's
    own spawn awaits between the fork and its return — under load, long enough for a
    shell opened during setup to be swept as setup's leftover."""
    env = {**scrubbed(os.environ), **request.env, "TERM": request.term}
    return subprocess.Popen(
        [sys.executable, "-c", _TAKE_TTY, shell_program(), "-i"],
        stdin=slave, stdout=slave, stderr=slave,
        cwd=workdir, env=env, start_new_session=True,
    )  # fmt: skip


class _Terminal:
    """The PTY's master side on the event loop: output into a queue, input written through."""

    def __init__(self, master: int) -> None:
        self.fd = master
        self.output: asyncio.Queue[bytes] = asyncio.Queue()
        os.set_blocking(master, False)
        asyncio.get_running_loop().add_reader(master, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:  # EIO: every slave side is closed
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self.fd)
        self.output.put_nowait(data)

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:
                await asyncio.sleep(0.01)

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.fd)
        os.close(self.fd)


async def run_shell(request: ShellOpen, reader: Reader, send: SendStream, workdir: Path) -> None:
    master, slave = pty.openpty()
    set_size(slave, request.cols, request.rows)
    try:
        proc = _spawn(request, workdir, slave)
        _SESSIONS.add(proc.pid)  # before any await: see _spawn
    except OSError as exc:
        os.close(master)
        await refuse(send, f"cannot start a shell on the node: {exc.strerror or exc}")
        return
    finally:
        os.close(slave)
    term = _Terminal(master)
    await send.write_all(encode_msg(LiveOk()))
    pumps = [
        asyncio.create_task(_to_terminal(reader, term)),
        asyncio.create_task(_from_terminal(term, send)),
    ]
    exited = asyncio.create_task(asyncio.to_thread(proc.wait))  # its own thread: shells are few
    try:
        # the operator's side ending first means it is gone: hang up on the shell
        await asyncio.wait({exited, pumps[0]}, return_when=asyncio.FIRST_COMPLETED)
        if exited.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DRAIN_S):
                    await asyncio.shield(pumps[1])
            code = exited.result()
            status = 128 - code if code < 0 else code
            await send.write_all(frame(Kind.EXIT, STATUS.pack(status)))
    finally:
        exited.cancel()
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        term.close()
        procgroup.signal_group(proc.pid, signal.SIGHUP)  # a hangup, as a closed terminal gives
        await procgroup.terminate_group(proc.pid, HANGUP_GRACE_S)
        _SESSIONS.discard(proc.pid)


async def _to_terminal(reader: Reader, term: _Terminal) -> None:
    """Keys and resizes from the operator, until its side of the stream ends."""
    while (got := await read_frame(reader)) is not None:
        kind, body = got
        if kind is Kind.DATA:
            await term.write(body)
        elif kind is Kind.RESIZE and len(body) == SIZE.size:
            cols, rows = SIZE.unpack(body)
            set_size(term.fd, max(cols, 1), max(rows, 1))


async def _from_terminal(term: _Terminal, send: SendStream) -> None:
    while data := await term.output.get():
        await send.write_all(frame(Kind.DATA, data))
