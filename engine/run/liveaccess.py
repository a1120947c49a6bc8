"""How a separate `swjob shell` / `forward` / `stop` process reaches a run's node.

Only the engine process that drives a run holds its node's transfer connection (its
shells and forwards ride it): the agent dials out (it opens no port and may sit behind
NAT), it obeys one operator endpoint id, and a second endpoint bound with the same
identity would fight the first for the relay. So the driving engine serves a local
access point instead: a Unix socket in the private live dir (engine/run/localsock.py:
other users cannot connect; a flood is capped) with a random token, announced per live
run in `<state>/live/<run id>.json` (0600, in a 0700 directory). A client first checks that
what answers is the engine the file names — this user's, that pid, and the run's lease
held — and only then sends one JSON line (token, run id, request), within
`HELLO_TIMEOUT_S`; it gets one back (`{"ok": true}` or the reason); then the connection
carries the live stream's bytes both ways, relayed unchanged (shell frames, or a
forwarded TCP connection's bytes). The job's env is added here, never sent by the client.
An engine killed with -9 leaves its file and socket behind: nothing answers there, or
something that fails the check, and the client says nobody drives the run. A stop
(`swjob stop`) is answered and the connection closed: the engine stops the run itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.livewire import Duplex, ForwardOpen, ShellOpen, splice, tcp_duplex
from engine.run.liveops import OPEN_TIMEOUT_S, LiveRequest, LiveStream, LiveUnavailable
from engine.run.localsock import guarded, peer, remove_socket, socket_path, unix_server
from engine.state import ownership
from engine.state.paths import state_dir
from engine.state.planted import own_subdir
from engine.state.wholefile import replace_whole

log = logging.getLogger("swjob.live")

HELLO_TIMEOUT_S = 5.0  # a client that connects and says nothing holds a descriptor no longer
MAX_CLIENTS = 64  # shells and forwarded connections at once, through this engine
MAX_LINE = 64 * 1024
CLIENT_WAIT_S = OPEN_TIMEOUT_S + HELLO_TIMEOUT_S  # the engine may wait that long for the node
OpenStream = Callable[[str, LiveRequest], Awaitable[LiveStream]]
StopRun = Callable[[str], None]
STOP = {"op": "stop"}  # the operator's stop, asked by `swjob stop` in another terminal


def access_dir() -> Path:
    path = own_subdir(state_dir() / "live")
    os.chmod(path, 0o700)
    return path


def _access_file(run_id: str, folder: Path | None = None) -> Path:
    """Where `run_id`'s access file is: in `folder`, the access dir an engine made (and
    checked) as it started, else in the access dir checked anew."""
    if not run_id or "/" in run_id or run_id.startswith("."):
        raise LiveUnavailable(f"not a run id: {run_id!r}")
    return (folder or access_dir()) / f"{run_id}.json"


def stream_duplex(stream: LiveStream) -> Duplex:
    return Duplex(stream.reader.some, stream.send.write_all, stream.send.finish)


class LiveAccess:
    """The local access point of one engine process."""

    def __init__(self, open_stream: OpenStream, stop: StopRun) -> None:
        self._open = open_stream
        self._stop = stop
        self._token = secrets.token_urlsafe(32)
        self._server: asyncio.Server | None = None
        self._socket: Path | None = None
        self._dir: Path | None = None  # made and checked once, at start: every run publishes
        self._published: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._refused = 0

    async def start(self) -> None:
        name = f"engine-{os.getpid()}-{secrets.token_hex(3)}.sock"  # tests run several engines
        self._dir = access_dir()
        self._socket = socket_path(self._dir, name)
        handler = guarded(self._handle, MAX_CLIENTS, self._refuse)
        self._server = await unix_server(handler, self._socket, MAX_LINE)

    def _refuse(self, why: str) -> None:
        self._refused += 1
        if self._refused == 1:  # a flood says it once, not once per connection
            log.warning("local access point: refused %s", why)

    def publish(self, run_id: str) -> None:
        """Let other processes of this user reach `run_id` through this engine."""
        assert self._socket is not None
        body = json.dumps({"socket": str(self._socket), "token": self._token, "pid": os.getpid()})
        replace_whole(_access_file(run_id, self._dir), body)
        self._published.add(run_id)

    def withdraw(self, run_id: str) -> None:
        if run_id in self._published:
            self._published.discard(run_id)
            with contextlib.suppress(OSError):
                _access_file(run_id, self._dir).unlink()

    async def close(self) -> None:
        for run_id in tuple(self._published):
            self.withdraw(run_id)
        if self._server is not None:
            self._server.close()
        if self._socket is not None:
            remove_socket(self._socket, access_dir())
        for task in tuple(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        local = tcp_duplex(reader, writer)
        try:
            stream = await self._answer(reader, writer)
            if stream is not None:
                await splice(local, stream_duplex(stream))
        except (ConnectionError, OSError, TimeoutError, ValueError):
            pass  # the client went away or spoke nonsense: nothing of ours is at stake
        finally:
            self._tasks.discard(task)
            local.close()

    async def _answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> LiveStream | None:
        async with asyncio.timeout(HELLO_TIMEOUT_S):
            line = await reader.readline()
        try:
            asked = json.loads(line)
            token = str(asked["token"])
            run_id = str(asked["run_id"])
            request = None if asked["request"] == STOP else _request(asked["request"])
        except (ValueError, KeyError, TypeError, ValidationError):
            return await _reply(writer, "bad request")
        if not hmac.compare_digest(token.encode(), self._token.encode()):
            return await _reply(writer, "wrong access token")
        try:
            if request is None:
                self._stop(run_id)
                return await _reply(writer, None)
            stream = await self._open(run_id, request)
        except LiveUnavailable as exc:
            return await _reply(writer, str(exc))
        await _reply(writer, None)
        return stream


def _request(data: Any) -> LiveRequest:
    if isinstance(data, dict) and data.get("op") == "forward":
        return ForwardOpen.model_validate(data)
    shell = ShellOpen.model_validate(data)
    return shell.model_copy(update={"env": {}})  # the job's env comes from the engine only


async def _reply(writer: asyncio.StreamWriter, error: str | None) -> None:
    answer = {"ok": True} if error is None else {"ok": False, "error": error}
    writer.write(json.dumps(answer).encode() + b"\n")
    await writer.drain()


def driven(run_id: str) -> bool:
    """True while some engine process announces `run_id` as live and is alive to serve it:
    an engine killed with -9 leaves its announcement behind, and its run is then nobody's
    (`swjob attach` takes it over) — not a run to forward to."""
    return _access_file(run_id).exists() and ownership.has_live_owner(run_id)


def not_driven(run_id: str) -> LiveUnavailable:
    return LiveUnavailable(
        f"no swjob process drives run {run_id} right now (`swjob attach {run_id}` takes it over)"
    )


async def connect(run_id: str, request: LiveRequest) -> Duplex:
    """The client side (`swjob shell`, `swjob forward`): a stream to the run's node through
    the engine that drives it; LiveUnavailable says why there is none. Nothing is sent
    before the listener proved to be that engine (`_check_engine`)."""
    reader, writer = await _ask(run_id, request.model_dump())
    return tcp_duplex(reader, writer)


async def ask_stop(run_id: str) -> None:
    """`swjob stop` from any terminal: the engine that drives `run_id` stops it as its own
    operator would (node torn down, FAILED "stopped by operator"); LiveUnavailable when no
    process drives it now, or it is past stopping."""
    _, writer = await _ask(run_id, STOP)
    writer.close()


async def _ask(
    run_id: str, request: dict[str, Any]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        access = json.loads(_access_file(run_id).read_text())
        address, pid, token = str(access["socket"]), int(access["pid"]), str(access["token"])
        reader, writer = await asyncio.open_unix_connection(address, limit=MAX_LINE)
    except (OSError, ValueError, KeyError, TypeError):
        raise not_driven(run_id) from None
    try:
        _check_engine(writer, pid, run_id)
    except LiveUnavailable:
        writer.close()
        raise
    hello = {"token": token, "run_id": run_id, "request": request}
    writer.write(json.dumps(hello).encode() + b"\n")
    try:
        async with asyncio.timeout(CLIENT_WAIT_S):
            answer = json.loads(await reader.readline())
    except (OSError, ValueError, TimeoutError):
        writer.close()
        raise LiveUnavailable(f"the swjob process driving run {run_id} did not answer") from None
    if not answer.get("ok"):
        writer.close()
        raise LiveUnavailable(str(answer.get("error") or "refused"))
    return reader, writer


def _check_engine(writer: asyncio.StreamWriter, pid: int, run_id: str) -> None:
    """The listener is this user's process with the pid the access file names, and the
    run's lease is held: otherwise it is not the engine (a stale address someone took
    over), and it must not get the token or a single key typed."""
    peer_pid, peer_uid = peer(writer.get_extra_info("socket"))
    ours = peer_uid in (None, os.getuid()) and peer_pid in (None, pid)
    if not ours or not ownership.has_live_owner(run_id):
        raise not_driven(run_id)
