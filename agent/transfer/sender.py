"""Turning a stream's items into framed packets and writing them, reads overlapped with sends.

Packets are built in a worker thread (file reads, hashing and zstd release the GIL)
while the previous packet is on the wire, and no further ahead: a stream holds two
packets at most whatever the tree, the one being written and the next. (With one more
waiting its turn, as before, the operator's peak RSS was 15 MB higher on tree a, 13 MB
on tree c and 19 MB on tree c over 100 Mbit, pushes no faster.)
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import stat
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from agent.transfer import wire
from agent.transfer.chunkdata import crc_of
from agent.transfer.compress import DEFAULT_LEVEL, Pace, maybe_compress, maybe_compress_parts
from agent.transfer.errors import TransferError, UnsafePath
from agent.transfer.memory import pin_malloc
from agent.transfer.safety import (
    Parents,
    check_link_target,
    check_parents,
    check_relpath,
    open_for_read,
)
from agent.transfer.schedule import BATCH_TARGET, CHUNK, LARGE_MIN, STREAMS, Item
from agent.transfer.zeros import all_zero, zero_crc

WRITE_PIECE = 1024 * 1024  # the binding sends 1 MiB writes faster than larger ones
# A stream's batches start this small and double up to BATCH_TARGET: nothing goes out
# before the first is packed, and four 4 MiB batches packed at once on a loaded machine
# held a push's first byte back 1-2 s (tree c); starting small, 0.4-0.7 s.
FIRST_BATCH = 256 * 1024


PACKER = "swjob-pack"  # the name of the threads packets are built in


@cache
def packers() -> ThreadPoolExecutor:
    """The threads every stream's packets are built in: one a core, at most one a stream.
    Each thread keeps its zstd contexts (~3.4 MB at level 6), and asyncio's own pool has
    up to cores + 4 threads, any of which a stream's next packet may land on: over a
    push, each of them came to hold contexts of its own. More packers than cores only
    contend for them, and hold more packets half-built."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return ThreadPoolExecutor(min(STREAMS, cores or 1), thread_name_prefix=PACKER)


os.register_at_fork(after_in_child=packers.cache_clear)  # a child has none of the threads


@dataclass
class Packet:
    parts: list[bytes]  # framed bytes, kept in parts so a chunk's data is never re-copied
    nbytes: int = 0  # file bytes inside (uncompressed)
    files: int = 0  # whole files inside
    current: str | None = None
    chunk_of: str | None = None
    hashes: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # path → why it was not sent
    compressed: bool = False
    pack_s: float = 0.0  # from asking a packer for it to having it (wait, read, hash, zstd)


class Changed(TransferError):
    """The file changed while it was read, twice in a row: no consistent copy exists."""


CHANGED = "changed during transfer"
HOT_NS = 200_000_000  # a file modified this recently may be being written right now
SETTLE_S = 0.05  # how long such a file must then stay unchanged


def _read_whole(fd: int, size: int) -> bytes:
    """Up to `size` bytes from the start (positioned reads: a second read sees the same)."""
    first = os.pread(fd, size, 0)
    if len(first) == size or not first:  # a small file: one read, nothing joined
        return first
    parts, done = [first], len(first)
    while done < size:
        piece = os.pread(fd, size - done, done)
        if not piece:
            break
        parts.append(piece)
        done += len(piece)
    return b"".join(parts)


def version(st: os.stat_result) -> str:
    """What must stay the same while a file is read for the bytes to be one consistent copy."""
    return ":".join(map(str, _version(st)))


def _version(st: os.stat_result) -> tuple[int, int, int, int]:
    """`version` as a tuple: compared for every file read, so not formatted as text."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


_SMALL_READS = threading.Lock()
"""Held by the packer reading a run of small things. Each file costs five syscalls, and
CPython hands the GIL to another thread at each: two packers reading small files at once
handed it over all the time (reading tree d, 100,000 1 KiB files, cost 2.1 s of CPU with
two packers against 1.3 s with one). One reads while the other compresses its batch,
hashes or reads a chunk, which release the GIL for long stretches, or waits for a hot
file to settle (`_settle`)."""
_reading = threading.local()  # `.small`: this thread holds _SMALL_READS


def _settle() -> None:
    """Give a file modified just now `SETTLE_S` to show a change (read_stable). A packer
    reading small things lets the others read meanwhile: files being written are hot, and
    a live sync pulls many of them."""
    if not getattr(_reading, "small", False):
        time.sleep(SETTLE_S)
        return
    _SMALL_READS.release()
    try:
        time.sleep(SETTLE_S)
    finally:
        _SMALL_READS.acquire()


def read_stable(
    root: Path,
    path: str,
    read: Callable[[int, os.stat_result], Any],
    parents: Parents | None = None,
):
    """`read(fd, stat)` with the file unchanged from before to after; read once more if it
    changed, then give up with `Changed`. A file rewritten while it is read must never
    travel as if its bytes were one version of it.

    "Unchanged" is the same inode, size, mtime and ctime. Timestamps move in clock ticks
    (~10 ms), so a quick rewrite can leave them as they were. A file modified in the last
    `HOT_NS` may be being written right now: it is given `SETTLE_S` (a few ticks) and must
    then show the same timestamps and the same bytes. An older file's timestamps are
    conclusive. (A writer paused longer than that, mid-rewrite, leaves a file that is torn
    yet still: no reader can tell it from one written that way.)
    With `parents` (many files read in a row) the file is opened through them.
    """
    for _ in range(2):
        fd = open_for_read(root, path) if parents is None else parents.open(path)
        try:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                raise UnsafePath(f"refused {path!r}: not a regular file")
            data = read(fd, before)
            after = os.fstat(fd)
            same = _version(before) == _version(after)
            if same and abs(time.time_ns() - after.st_mtime_ns) < HOT_NS:
                _settle()
                same = _version(os.fstat(fd)) == _version(after) and read(fd, after) == data
        finally:
            os.close(fd)
        if same:
            return before, data
    raise Changed(f"{path!r}: {CHANGED}")


def whole_sha256(root: Path, path: str) -> str | None:
    """The SHA-256 of `path`'s whole content, read as a sender reads it (no link followed,
    one unchanged version); None when it cannot be read so. The operator checks a large
    output, which travels in CRC-checked chunks, against it before it takes its name."""

    def digest(fd: int, st: os.stat_result) -> str:
        whole, offset = hashlib.sha256(), 0
        while piece := os.pread(fd, WRITE_PIECE * 4, offset):
            whole.update(piece)
            offset += len(piece)
        return whole.hexdigest()

    try:
        return read_stable(root, path, digest)[1]
    except (OSError, TransferError):
        return None


def _file_record(root: Path, path: str, packet: Packet, parents: Parents) -> list[bytes]:
    st, data = read_stable(root, path, lambda fd, st: _read_whole(fd, st.st_size), parents)
    if st.st_size > LARGE_MIN * 2:
        raise Changed(f"{path!r}: {CHANGED} (grew to {st.st_size} bytes)")
    if len(data) != st.st_size:
        raise Changed(f"{path!r}: {CHANGED} (shrank while read)")
    digest = hashlib.sha256(data).digest()
    packet.hashes[path] = digest.hex()
    packet.nbytes += len(data)
    packet.files += 1
    packet.current = path
    return wire.file_frame(path, stat.S_IMODE(st.st_mode), st.st_mtime_ns, digest, data)


def skip_reason(path: str, exc: Exception) -> str:
    """One line saying why `path` was not sent: vanished, unreadable, refused, changed."""
    if isinstance(exc, FileNotFoundError):
        return "vanished before it could be read"
    if isinstance(exc, OSError):
        return f"cannot be read: {exc.strerror or exc}"
    text = str(exc)
    return CHANGED if isinstance(exc, Changed) else text


def _skip_record(path: str, exc: Exception, packet: Packet) -> list[bytes]:
    why = skip_reason(path, exc)
    packet.skipped[path] = why
    packet.current = path
    return [wire.record({"t": "skip", "p": path, "why": why})]


def _small_record(root: Path, item: Item, packet: Packet, parents: Parents) -> list[bytes]:
    """The record of one small item, as the pieces the batch joins."""
    kind, path = item[0], check_relpath(item[1])
    if kind == "file":
        try:
            return _file_record(root, path, packet, parents)
        except (OSError, TransferError) as exc:  # this file only: the others still go
            return _skip_record(path, exc, packet)
    check_parents(root, path)
    if kind == "dir":
        st = os.lstat(root / path)
        if not stat.S_ISDIR(st.st_mode):
            raise TransferError(f"{path!r} is no longer a directory")
        return [wire.record({"t": "dir", "p": path, "m": stat.S_IMODE(st.st_mode)})]
    if kind == "link":
        target = check_link_target(path, os.readlink(root / path))
        return [wire.record({"t": "link", "p": path, "to": target})]
    raise TransferError(f"unknown item kind {kind!r} for {path!r}")


def _read_pieces(fd: int, start: int, length: int) -> list[bytes]:
    """`length` bytes from `start` (fewer if the file shrank), as `WRITE_PIECE` pieces: the
    sizes the stream is written in, so no piece is sliced (copied) again on the way out."""
    pieces, done = [], 0
    while done < length:
        piece = os.pread(fd, min(WRITE_PIECE, length - done), start + done)
        if not piece:
            break
        pieces.append(piece)
        done += len(piece)
    return pieces


def _read_chunk(fd: int, st: os.stat_result, index: int) -> list[bytes] | int:
    """The chunk's bytes, or its length when it is all zeros: a hole (found with SEEK_DATA,
    without reading) or zeros written out. Sparse outputs then cost neither disk reads nor
    bytes on the wire."""
    start = index * CHUNK
    length = min(CHUNK, st.st_size - start)
    if length <= 0:
        return []
    try:
        data_at = os.lseek(fd, start, os.SEEK_DATA)
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # ENXIO: nothing but hole from here to the end
            raise
        data_at = st.st_size
    if data_at >= start + length:
        return length
    pieces = _read_pieces(fd, start, length)
    return sum(map(len, pieces)) if pieces and all(map(all_zero, pieces)) else pieces


def _chunk_packet(root: Path, path: str, index: int, level: int) -> Packet:
    check_relpath(path)
    try:
        st, data = read_stable(root, path, lambda fd, st: _read_chunk(fd, st, index))
        if not data:
            raise Changed(f"{path!r}: {CHANGED} (shrank while read)")
    except (OSError, TransferError) as exc:
        packet = Packet([])
        packet.parts = _skip_record(path, exc, packet)
        return packet
    meta = {"t": "chunk", "p": path, "m": stat.S_IMODE(st.st_mode), "mt": st.st_mtime_ns}
    meta |= {"s": st.st_size, "i": index, "v": version(st)}
    if isinstance(data, int):  # all zeros: no data frame
        meta |= {"n": data, "zero": True, "c": zero_crc(data)}
        return Packet([wire.meta(meta)], data, 0, path, chunk_of=path)
    nbytes = sum(map(len, data))
    payload, packed = maybe_compress_parts(data, path, level)
    meta |= {"n": nbytes, "z": packed, "c": crc_of(data)}
    head = wire.meta(meta) + wire.header(wire.DATA, sum(map(len, payload)))
    return Packet([head, *payload], nbytes, 0, path, chunk_of=path, compressed=packed)


def build_packet(
    root: Path,
    items: list[Item],
    start: int,
    level: int = DEFAULT_LEVEL,
    target: int = BATCH_TARGET,
) -> tuple[Packet, int]:
    """The packet for `items[start:]` (small things up to about `target` file bytes) and
    the index after it (runs in a worker thread), compressed at zstd `level` where that pays."""
    packet, parts, i = Packet([]), [], start
    if items[start][0] == "chunk":
        return _chunk_packet(root, items[start][1], int(items[start][2]), level), start + 1
    parents = Parents(root)
    try:
        with _SMALL_READS:
            _reading.small = True
            try:
                while i < len(items) and items[i][0] != "chunk" and packet.nbytes < target:
                    parts += _small_record(root, items[i], packet, parents)
                    i += 1
            finally:
                _reading.small = False
    except OSError as exc:
        raise TransferError(f"cannot read {items[i][1]!r}: {exc.strerror or exc}") from None
    finally:
        parents.close()
    body = b"".join(parts)
    parts.clear()  # the body holds these bytes now: not twice in memory while it is packed
    payload, packed = maybe_compress(body, level=level)
    packet.compressed = packed
    packet.parts = [wire.header(wire.ZBATCH if packed else wire.BATCH, len(payload)), payload]
    return packet, i


async def write_parts(write: Callable[[bytes], Awaitable[None]], parts: list[bytes]) -> None:
    """Write `parts` in pieces of at most WRITE_PIECE bytes, small parts coalesced; a part
    of a fitting size is written as it is (no copy)."""
    pending = b""
    for part in parts:
        if len(pending) + len(part) <= WRITE_PIECE:
            pending += part
            continue
        if pending:
            await write(pending)
            pending = b""
        if len(part) <= WRITE_PIECE:
            pending = part
            continue
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
    pin_malloc()
    queue: asyncio.Queue[Packet | BaseException | None] = asyncio.Queue(1)
    pace = Pace()

    async def produce() -> None:
        i, target = 0, FIRST_BATCH
        try:
            while i < len(items):
                build = (build_packet, root, items, i, pace.level, target)
                started = time.perf_counter()
                packet, i = await asyncio.get_running_loop().run_in_executor(packers(), *build)
                packet.pack_s = time.perf_counter() - started  # with its wait for a packer
                target = min(2 * target, BATCH_TARGET)
                await queue.put(packet)
                await queue.join()  # the next is built while this one is written, not before
            await queue.put(None)
        except Exception as exc:
            await queue.put(exc)

    producer = asyncio.create_task(produce())
    sent = 0
    try:
        while (packet := await queue.get()) is not None:
            queue.task_done()
            if isinstance(packet, BaseException):
                raise packet
            started = time.perf_counter()
            await write_parts(write, packet.parts)
            sent += sum(map(len, packet.parts))
            if packet.compressed:
                pace.observe(packet.pack_s, time.perf_counter() - started, sent)
            on_packet(packet)
    finally:
        producer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await producer
