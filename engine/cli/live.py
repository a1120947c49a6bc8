"""`swjob shell RUN` and `swjob forward RUN PORT`: the live node from a terminal.

Both reach the node through the engine process that drives the run (its local access
point, engine/run/liveaccess.py) — the console, a `swjob run`, or a `swjob attach`.
The shell puts this terminal in raw mode, so every key (Ctrl-C included) goes to the
node's PTY as typed and the node's terminal decides what it means; the window size
follows SIGWINCH (a terminal that reports no size, 0×0 as a fresh pty does, counts
as 80×24). The exit status is the remote shell's. `swjob forward` listens on a Unix
socket in the private live dir unless `--local PORT` asks for 127.0.0.1:PORT
(engine/run/forward.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import termios
import tty
from collections.abc import Iterator

from agent.livewire import Duplex, ForwardOpen, Reader, ShellOpen
from agent.shell import SIZE, STATUS, Kind, frame, read_frame
from engine.cli.lookup import find_run, no_such_run
from engine.run.forward import Forward
from engine.run.liveaccess import access_dir, connect, driven, not_driven
from engine.run.liveops import LiveUnavailable
from engine.run.localsock import socket_path

LOST = 255  # like ssh: the connection ended without an exit status
END_POLL_S = 1.0
FALLBACK_SIZE = (80, 24)


def resolve(run_ref: str) -> str:
    """The live run's id from an id or unique prefix; LiveUnavailable when there is none."""
    view = find_run(run_ref)
    if view is None:
        raise LiveUnavailable(no_such_run(run_ref))
    if view.terminal:
        raise LiveUnavailable(f"run {view.run_id} is over ({view.state}): no node to reach")
    return view.run_id


def _size() -> tuple[int, int]:
    """The terminal's columns and rows; 80×24 when it has none or says 0 (a fresh pty,
    some IDE and serial terminals)."""
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except OSError:
        return FALLBACK_SIZE
    if size.columns < 1 or size.lines < 1:
        return FALLBACK_SIZE
    return size.columns, size.lines


def check_port(port: int | None, what: str) -> None:
    """A TCP port is 1-65535: anything else is refused in one line, before anything else."""
    if port is not None and not 1 <= port <= 65535:
        raise LiveUnavailable(f"{what} {port} is not a TCP port (1-65535)")


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[None]:
    """Raw mode while the shell runs (keys go to the node as typed), restored after."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSANOW)  # not TCSAFLUSH: keys typed ahead must reach the node
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


class _DuplexStream:
    """A Duplex as the piece reader agent.live.Reader expects."""

    def __init__(self, duplex: Duplex) -> None:
        self._duplex = duplex

    async def read(self, size_limit: int) -> bytes:
        return await self._duplex.read()


async def shell(run_ref: str) -> int:
    run_id = resolve(run_ref)
    cols, rows = _size()
    term = os.environ.get("TERM") or "xterm-256color"
    duplex = await connect(run_id, ShellOpen(cols=cols, rows=rows, term=term))
    loop = asyncio.get_running_loop()
    keys: asyncio.Queue[bytes] = asyncio.Queue()
    stdin = sys.stdin.fileno()

    def readable() -> None:
        data = os.read(stdin, 4096)
        if not data:  # stdin ended (a script): end the remote input like Ctrl-D would
            loop.remove_reader(stdin)
            data = b"\x04"
        keys.put_nowait(frame(Kind.DATA, data))

    def resized() -> None:
        keys.put_nowait(frame(Kind.RESIZE, SIZE.pack(*_size())))

    with _raw(stdin):
        loop.add_reader(stdin, readable)
        loop.add_signal_handler(signal.SIGWINCH, resized)
        sender = asyncio.create_task(_send_keys(keys, duplex))
        try:
            return await _receive(duplex)
        finally:
            sender.cancel()
            loop.remove_reader(stdin)
            loop.remove_signal_handler(signal.SIGWINCH)
            duplex.close()


async def _send_keys(keys: asyncio.Queue[bytes], duplex: Duplex) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while True:
            await duplex.write(await keys.get())


async def _receive(duplex: Duplex) -> int:
    reader = Reader(_DuplexStream(duplex))
    out = sys.stdout.buffer
    while (got := await read_frame(reader)) is not None:
        kind, body = got
        if kind is Kind.DATA:
            out.write(body)
            out.flush()
        elif kind is Kind.EXIT:
            return STATUS.unpack(body)[0]
    print("\r\nswjob: connection to the node closed\r", file=sys.stderr)
    return LOST


async def forward(run_ref: str, remote_port: int, local_port: int | None) -> int:
    """Forward until Ctrl-C or the run's end: from a Unix socket in the private live dir,
    or from 127.0.0.1:`local_port` when one is given."""
    check_port(remote_port, "node port")
    check_port(local_port, "local port")
    run_id = resolve(run_ref)
    if not driven(run_id):
        raise not_driven(run_id)
    fwd = Forward(run_id=run_id, remote_port=remote_port)
    if local_port is None:
        fwd.socket = socket_path(access_dir(), f"{run_id}-{remote_port}.sock")
    else:
        fwd.local_port = local_port
    await fwd.start(lambda: connect(run_id, ForwardOpen(port=remote_port)))
    print(f"forwarding {fwd.describe()} of run {run_id} — Ctrl-C stops", flush=True)
    try:
        while driven(run_id):
            await asyncio.sleep(END_POLL_S)
        print(f"run {run_id} ended: forwarding stopped", flush=True)
        return 0
    finally:
        await fwd.close()
