"""The node side of the transfer service: serve push and pull requests on one connection.

The agent dials the orchestrator with the transfer ALPN and hands the connection
here. The orchestrator opens a bi stream per request; each starts with a `req`
record naming the operation:

  status  → which files and chunks of a push session this node already verified
            (a new attempt starts: files that failed may be sent again)
  push    → records to land under the workdir, answered by `ok` (with the files that
            did not land and why: skipped by the sender, changed while read) or `err`
  list    → resolve declared outputs: `entries` pages, then `end` with missing/refused
            (and, asked with `digests`, each large file's whole SHA-256); asked with
            `packed`, a page may be `zentries` and a data frame: its rows as zstd JSON
  pull    → `items` pages naming what to send, answered by the records and `end`
  held    → what a warm node holds of the previous run's workspace (agent/transfer/held.py):
            `held` pages of [path, size, mtime_ns, mode], then `end`
  adopt   → `adopt` pages of such rows for a push session: the node links those still
            held into the workdir, counts them verified, and answers `adopted` pages, `end`
  live    → the rest of the stream is a shell or a forward (agent/live.py), served by
            `serve_transfer`'s `live` handler: the live service's streams share this
            connection rather than open one of their own

Push sessions outlive a connection (kept in this process), so a push retried
after a reconnect resumes where the dropped one stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from iroh.iroh_ffi import IrohError

from agent.transfer import held, wire
from agent.transfer.compress import maybe_compress
from agent.transfer.errors import TransferError
from agent.transfer.memory import relaxed_gc
from agent.transfer.receiver import LANDERS_AFTER, Landed, Receiver
from agent.transfer.schedule import LARGE_MIN
from agent.transfer.sender import send_items, whole_sha256
from agent.transfer.walk import Entry, resolve_outputs
from agent.transfer.wire import PAGE, FrameReader, StreamEnded

LIVE_OP = "live"
_MAX_SESSIONS = 4
_sessions: OrderedDict[tuple[str, str], Receiver] = OrderedDict()


def _session(workdir: Path, session: object) -> Receiver:
    """The receiver of a push session, created on first use; old sessions are dropped."""
    if not isinstance(session, str) or not 0 < len(session) <= 64:
        raise wire.WireError("bad push session id")
    key = (str(workdir), session)
    if key not in _sessions:
        # a workdir nobody reads yet: files land in place, a long push's batches in landers
        _sessions[key] = Receiver(workdir, in_place=True, landers_after=LANDERS_AFTER)
        while len(_sessions) > _MAX_SESSIONS:
            _sessions.popitem(last=False)[1].close()
    _sessions.move_to_end(key)
    return _sessions[key]


def pages(kind: str, key: str, values: list[Any]) -> bytes:
    """Values split over several records, so no frame grows with the tree."""
    return b"".join(
        wire.record({"t": kind, key: values[i : i + PAGE]}) for i in range(0, len(values), PAGE)
    )


LiveHandler = Callable[[Any, Any, bytes], Awaitable[None]]
"""Serves a `live` stream: (send, recv, the bytes read past the request)."""


MAX_STREAMS = 256
"""Streams the orchestrator may hold open on the transfer connection at once. Shells and
forwarded TCP connections ride it too, up to 64 through `swjob forward` and 64 through the
console's access point (engine/run/forward.py, liveaccess.py): at QUIC's default of 100, a
page holding many connections through a forward would leave the final pull's `open_bi`
waiting for one to close."""


async def serve_transfer(conn: Any, workdir: Path, live: LiveHandler | None = None) -> None:
    """Serve requests on `conn` until it closes; never writes outside `workdir`. `live`
    serves the live service's streams (refused without it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    conn.set_max_concurrent_bi_streams(MAX_STREAMS)
    tasks: set[asyncio.Task[None]] = set()
    try:
        while True:
            try:
                bi = await conn.accept_bi()
            except Exception:
                return  # the connection closed: the orchestrator redials via the agent
            task = asyncio.create_task(_serve_stream(bi, workdir, live))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        for task in list(tasks):
            task.cancel()
        for task in list(tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _serve_stream(bi: Any, workdir: Path, live: LiveHandler | None) -> None:
    send, recv = bi.send(), bi.recv()
    reader = FrameReader(recv)
    try:
        req = await reader.next_meta()
        if req is None or req.get("t") != "req":
            raise wire.WireError("a transfer stream must start with a request")
        if req.get("op") == LIVE_OP and live is not None:  # long-lived: no relaxed gc
            await live(send, recv, reader.leftover())
            return
        handler = _HANDLERS.get(req.get("op"))
        if handler is None:
            raise wire.WireError(f"unknown transfer operation {req.get('op')!r}")
        with relaxed_gc():  # many small files: agent/transfer/memory.py
            await handler(req, reader, send, workdir)
    except (StreamEnded, IrohError):
        return  # the connection dropped mid-request; the client retries on a new one
    except TransferError as exc:
        await _refuse(bi, str(exc))
    except Exception as exc:  # a node-side fault: tell the operator instead of hanging it
        await _refuse(bi, f"node-side transfer error: {type(exc).__name__}: {exc}")
    with contextlib.suppress(Exception):
        await send.finish()


async def _refuse(bi: Any, message: str) -> None:
    """Answer with an error record and stop reading, so the client's writes end at once."""
    with contextlib.suppress(Exception):
        await bi.send().write_all(wire.record({"t": "err", "msg": message}))
        await bi.recv().stop(1)


async def _status(req: dict[str, Any], reader: FrameReader, send: Any, workdir: Path) -> None:
    receiver = _session(workdir, req.get("session"))
    receiver.forget_failed()
    files = [[p, landed.sha256] for p, landed in receiver.verified.items()]
    chunks = [[p, sorted(done)] for p, done in receiver.chunks_held().items()]
    body = pages("files", "f", files) + pages("chunks", "c", chunks)
    await send.write_all(body + wire.record({"t": "end"}))


async def _push(req: dict[str, Any], reader: FrameReader, send: Any, workdir: Path) -> None:
    receiver = _session(workdir, req.get("session"))
    await receiver.receive(reader, lambda nbytes, files, current: None)
    failed = [[p, why] for p, why in receiver.failed.items()]
    await send.write_all(wire.record({"t": "ok", "failed": failed}))


async def _list(req: dict[str, Any], reader: FrameReader, send: Any, workdir: Path) -> None:
    """The listing's pages go out while the walk goes on: 100,000 outputs take the walk
    ~1 s on a node, and the operator reads each page meanwhile instead of after it."""
    patterns = req.get("patterns")
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise wire.WireError("list request without patterns")
    loop = asyncio.get_running_loop()
    ready: asyncio.Queue[bytes | None] = asyncio.Queue()
    abandoned = threading.Event()  # nobody reads the pages any more: the walk stops
    packed = req.get("packed") is True  # the operator reads zstd pages (`zentries`)

    def page(entries: list[Entry]) -> None:  # on the walk's thread
        if abandoned.is_set():
            raise StreamEnded("the listing's reader is gone")
        loop.call_soon_threadsafe(ready.put_nowait, page_record([e.row() for e in entries]))

    def page_record(rows: list[list[object]]) -> bytes:
        """A plain page, or a packed one (100,000 outputs list as 6.9 MB of JSON, 0.75 MB
        packed): the rows are encoded once either way, unless packing does not pay."""
        if packed:
            payload, compressed = maybe_compress(json.dumps(rows).encode())
            if compressed:
                return wire.record({"t": "zentries"}, payload)
        return wire.record({"t": "entries", "e": rows})

    async def sending() -> None:
        try:
            while (body := await ready.get()) is not None:
                await send.write_all(body)
        except BaseException:
            abandoned.set()
            raise

    sender = asyncio.create_task(sending())
    try:
        walk, missing = await asyncio.to_thread(resolve_outputs, workdir, patterns, page)
    except Exception:  # the walk failed: whole pages only, then the error record
        ready.put_nowait(None)
        with contextlib.suppress(Exception):
            await sender
        raise
    except BaseException:  # cancelled: the stream goes, and the walk with it
        abandoned.set()
        sender.cancel()
        raise
    ready.put_nowait(None)  # after every page: the walk queued each before it returned
    await sender
    end = {"t": "end", "missing": missing, "refused": walk.refused}
    if req.get("digests"):  # the final pull: each large file's SHA-256, to check it whole
        large = [e.path for e in walk.entries if e.kind == "file" and e.size > LARGE_MIN]
        end["sha256"] = await asyncio.to_thread(_digests, workdir, large)
    await send.write_all(wire.record(end))


async def _pull(req: dict[str, Any], reader: FrameReader, send: Any, workdir: Path) -> None:
    items: list[Any] = []
    while (page := await reader.next_meta()) is not None and page["t"] == "items":
        if not isinstance(page.get("i"), list):
            raise wire.WireError("bad items page")
        items.extend(_item(i) for i in page["i"])
    try:
        await send_items(workdir, items, send.write_all)
    except TransferError as exc:
        await send.write_all(wire.record({"t": "err", "msg": str(exc)}))
        return
    await send.write_all(wire.record({"t": "end"}))


def _digests(workdir: Path, paths: list[str]) -> dict[str, str]:
    found = {path: whole_sha256(workdir, path) for path in paths}
    return {path: digest for path, digest in found.items() if digest is not None}


def _item(value: Any) -> list[Any]:
    if not isinstance(value, list) or not value or value[0] not in ("dir", "link", "file", "chunk"):
        raise wire.WireError(f"bad pull item {value!r}")
    if value[0] == "chunk" and (len(value) != 3 or not isinstance(value[2], int)):
        raise wire.WireError(f"bad pull item {value!r}")
    return value


async def _held(req: dict[str, Any], reader: FrameReader, send: Any, workdir: Path) -> None:
    rows = await asyncio.to_thread(held.held_files, workdir)
    await send.write_all(pages("held", "h", rows) + wire.record({"t": "end"}))


async def _adopt(req: dict[str, Any], reader: FrameReader, send: Any, workdir: Path) -> None:
    receiver = _session(workdir, req.get("session"))
    rows: list[Any] = []
    while (page := await reader.next_meta()) is not None and page["t"] == "adopt":
        if not isinstance(page.get("a"), list):
            raise wire.WireError("bad adopt page")
        rows.extend(page["a"])
    adopted = await asyncio.to_thread(_adopt_rows, receiver, workdir, rows)
    await send.write_all(pages("adopted", "a", adopted) + wire.record({"t": "end"}))


def _adopt_rows(receiver: Receiver, workdir: Path, rows: list[Any]) -> list[str]:
    adopted = []
    for row in rows:
        if held.adopt(workdir, row):
            path, size, _, mode = row
            receiver.verified[path] = Landed(path, size, mode, None)
            adopted.append(path)
    return adopted


_HANDLERS = {
    "status": _status,
    "push": _push,
    "list": _list,
    "pull": _pull,
    "held": _held,
    "adopt": _adopt,
}
