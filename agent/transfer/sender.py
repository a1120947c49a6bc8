"""Turning a stream's items into framed packets and writing them, reads overlapped with sends.

Packets are built in a worker thread (file reads, SHA-256 and zstd release the GIL)
while the previous packet is on the wire; a small queue bounds memory to a few
packets per stream whatever the tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from agent.transfer import wire
from agent.transfer.compress import maybe_compress
from agent.transfer.errors import TransferError
from agent.transfer.safety import check_link_target, check_parents, check_relpath, open_for_read
from agent.transfer.schedule import CHUNK, LARGE_MIN, Item

BATCH_TARGET = 4 * 1024 * 1024
WRITE_PIECE = 1024 * 1024  # the binding sends 1 MiB writes faster than larger ones
_QUEUE = 2


@dataclass
class Packet:
    parts: list[bytes]  # framed bytes, kept in parts so a chunk's data is never re-copied
    nbytes: int = 0  # file bytes inside (uncompressed)
    files: int = 0  # whole files inside
    current: str | None = None
    chunk_of: str | None = None
    hashes: dict[str, str] = field(default_factory=dict)


def _read_whole(fd: int, size: int) -> bytes:
    parts, left = [], size
    while left > 0:
        piece = os.read(fd, left)
        if not piece:
            break
        parts.append(piece)
        left -= len(piece)
    return b"".join(parts)


def _file_record(root: Path, path: str, packet: Packet) -> bytes:
    fd = open_for_read(root, path)
    try:
        st = os.fstat(fd)
        if st.st_size > LARGE_MIN * 2:
            raise TransferError(f"{path!r} grew during the transfer")
        data = _read_whole(fd, st.st_size)
    finally:
        os.close(fd)
    digest = hashlib.sha256(data).hexdigest()
    packet.hashes[path] = digest
    packet.nbytes += len(data)
    packet.files += 1
    packet.current = path
    meta = {"t": "file", "p": path, "m": stat.S_IMODE(st.st_mode), "mt": st.st_mtime_ns}
    return wire.record(meta | {"s": len(data), "h": digest}, data)


def _small_record(root: Path, item: Item, packet: Packet) -> bytes:
    kind, path = item[0], check_relpath(item[1])
    if kind == "file":
        return _file_record(root, path, packet)
    check_parents(root, path)
    if kind == "dir":
        st = os.lstat(root / path)
        if not stat.S_ISDIR(st.st_mode):
            raise TransferError(f"{path!r} is no longer a directory")
        return wire.record({"t": "dir", "p": path, "m": stat.S_IMODE(st.st_mode)})
    if kind == "link":
        target = check_link_target(path, os.readlink(root / path))
        return wire.record({"t": "link", "p": path, "to": target})
    raise TransferError(f"unknown item kind {kind!r} for {path!r}")


def _chunk_packet(root: Path, path: str, index: int) -> Packet:
    fd = open_for_read(root, check_relpath(path))
    try:
        st = os.fstat(fd)
        data = os.pread(fd, CHUNK, index * CHUNK)
    finally:
        os.close(fd)
    if not data:
        raise TransferError(f"{path!r} shrank during the transfer")
    payload, packed = maybe_compress(data, path)
    meta = {"t": "chunk", "p": path, "m": stat.S_IMODE(st.st_mode), "mt": st.st_mtime_ns}
    meta |= {"s": st.st_size, "i": index, "n": len(data), "z": packed}
    meta["h"] = hashlib.sha256(data).hexdigest()
    parts = [wire.meta(meta), wire.HEADER.pack(wire.DATA, len(payload)), payload]
    return Packet(parts, len(data), 0, path, chunk_of=path)


def build_packet(root: Path, items: list[Item], start: int) -> tuple[Packet, int]:
    """The packet for `items[start:]` and the index after it (runs in a worker thread)."""
    packet, parts, i = Packet([]), [], start
    try:
        if items[start][0] == "chunk":
            return _chunk_packet(root, items[start][1], int(items[start][2])), start + 1
        while i < len(items) and items[i][0] != "chunk" and packet.nbytes < BATCH_TARGET:
            parts.append(_small_record(root, items[i], packet))
            i += 1
    except OSError as exc:
        raise TransferError(f"cannot read {items[i][1]!r}: {exc.strerror or exc}") from None
    body = b"".join(parts)
    payload, packed = maybe_compress(body)
    packet.parts = [wire.frame(wire.ZBATCH if packed else wire.BATCH, payload)]
    return packet, i


async def write_parts(write: Callable[[bytes], Awaitable[None]], parts: list[bytes]) -> None:
    """Write `parts` in pieces of at most WRITE_PIECE bytes, small parts coalesced."""
    pending = b""
    for part in parts:
        if len(pending) + len(part) <= WRITE_PIECE:
            pending += part
            continue
        if pending:
            await write(pending)
            pending = b""
        view = memoryview(part)
        for start in range(0, len(part), WRITE_PIECE):
            await write(bytes(view[start : start + WRITE_PIECE]))
    if pending:
        await write(pending)


async def send_items(
    root: Path,
    items: list[Item],
    write: Callable[[bytes], Awaitable[None]],
    on_packet: Callable[[Packet], None] = lambda p: None,
) -> None:
    """Write the packets for `items`, building the next one while the current one is sent."""
    queue: asyncio.Queue[Packet | BaseException | None] = asyncio.Queue(_QUEUE)

    async def produce() -> None:
        i = 0
        try:
            while i < len(items):
                packet, i = await asyncio.to_thread(build_packet, root, items, i)
                await queue.put(packet)
            await queue.put(None)
        except Exception as exc:
            await queue.put(exc)

    producer = asyncio.create_task(produce())
    try:
        while (packet := await queue.get()) is not None:
            if isinstance(packet, BaseException):
                raise packet
            await write_parts(write, packet.parts)
            on_packet(packet)
    finally:
        producer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await producer
