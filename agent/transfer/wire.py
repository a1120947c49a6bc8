"""The transfer framing, the same in both directions.

A stream carries records. A record is a JSON meta frame, followed by one data frame
for the kinds that carry bytes (a whole small file, or one chunk of a large file).
Records of many small files are packed into batch frames, zstd-compressed when that
pays, so thousands of files flow back to back with no round trip per file.

Frame: 1 byte kind, 4 bytes big-endian length, body.
  M  meta (JSON object; `t` names the record: req, dir, link, file, chunk, skip, end, err, ...)
  D  data for the preceding meta (none for a chunk marked `zero`: all zero bytes, a hole)

A `file` record carries its file's SHA-256 (`h`), a `chunk` record its bytes' CRC-32
(`c`). A `skip` record names a file the sender could not send and why (vanished,
unreadable, changed while read); a chunk's `v` names the version of the file it was
read from.
  F  a whole small file in one frame, no JSON: mode, mtime, the path's length and the
     SHA-256 packed in a fixed header (`FILE_HEAD`), then the path (UTF-8), then the
     bytes. The same facts as a `file` meta and its data frame, at a fraction of the
     bytes and CPU a file: a tree of 100,000 small files is 100,000 of these.
  Z  a zstd-compressed run of M/D/F frames    B  the same run, uncompressed
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Iterator
from typing import Any, NamedTuple, Protocol

from agent.readsize import ReadSize
from agent.transfer.errors import WireError

PAGE = 4096
"""Values in one record of a paged answer (a listing, a push's status): no frame grows
with the tree."""

META, DATA, ZBATCH, BATCH, FILE = b"M"[0], b"D"[0], b"Z"[0], b"B"[0], b"F"[0]
HEADER = struct.Struct(">BI")
FILE_HEAD = struct.Struct(">HqH32s")  # mode, mtime_ns, path length in bytes, SHA-256
_FILE_FRAME = struct.Struct(">BIHqH32s")  # the frame's header and FILE_HEAD, packed at once
MAX_MODE = 0o7777
MAX_FRAME = 64 * 1024 * 1024
_EXACT_MIN = 64 * 1024
TRICKLE = 128 * 1024  # a smaller piece of a large body: data trickles in, pace the reads
FAST = 1 << 20  # a piece this large: a fast link, take the rest with one read_exact
PACE_S = 0.005
CARRIES_DATA = frozenset({"file", "chunk"})
# one encoder for every meta frame: json.dumps with separators builds a new one per call
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


def carries_data(meta: dict[str, Any]) -> bool:
    """A data frame follows this meta: file and chunk records, except all-zero chunks."""
    return meta["t"] in CARRIES_DATA and meta.get("zero") is not True


class StreamEnded(Exception):
    """The stream ended in the middle of a record: the connection dropped (retryable)."""


class Readable(Protocol):
    async def read(self, size_limit: int) -> bytes: ...
    async def read_exact(self, size: int) -> bytes: ...


def header(kind: int, size: int) -> bytes:
    """A frame's header alone, for a body sent as it is (a large body is not copied)."""
    if size > MAX_FRAME:
        raise WireError(f"frame of {size} bytes exceeds {MAX_FRAME}")
    return HEADER.pack(kind, size)


def frame(kind: int, body: bytes) -> bytes:
    return header(kind, len(body)) + body


def meta(obj: dict[str, Any]) -> bytes:
    return frame(META, _ENCODE(obj).encode())


class FileMeta(NamedTuple):
    """What an `F` frame says about its file (the bytes follow it in the same frame)."""

    path: str
    mode: int
    mtime_ns: int
    sha256: bytes  # raw, 32 bytes


def file_frame(path: str, mode: int, mtime_ns: int, sha256: bytes, data: bytes) -> list[bytes]:
    """A whole small file as one `F` frame, in two pieces (the data is not copied)."""
    name = path.encode("utf-8", "surrogatepass")
    size = FILE_HEAD.size + len(name) + len(data)
    if size > MAX_FRAME:
        raise WireError(f"frame of {size} bytes exceeds {MAX_FRAME}")
    return [_FILE_FRAME.pack(FILE, size, mode, mtime_ns, len(name), sha256) + name, data]


def parse_file(body: memoryview) -> tuple[FileMeta, memoryview]:
    """An `F` frame's facts and its file's bytes (a view into `body`, not a copy);
    WireError for a frame no sender of ours makes (the path is checked by the caller)."""
    if len(body) < FILE_HEAD.size:
        raise WireError("file frame shorter than its header")
    mode, mtime_ns, length, sha256 = FILE_HEAD.unpack_from(body)
    end = FILE_HEAD.size + length
    if end > len(body) or mode > MAX_MODE or mtime_ns < 0:
        raise WireError("bad file frame header")
    try:
        path = str(body[FILE_HEAD.size : end], "utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise WireError("bad file frame: path is not UTF-8") from None
    return FileMeta(path, mode, mtime_ns, sha256), body[end:]


def record(obj: dict[str, Any], data: bytes | None = None) -> bytes:
    """One record: its meta frame and, for file and chunk records, its data frame."""
    return meta(obj) if data is None else b"".join([meta(obj), header(DATA, len(data)), data])


def parse_meta(body: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(body)
    except ValueError:
        raise WireError("bad meta frame: not JSON") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("t"), str):
        raise WireError("bad meta frame: no record type")
    return obj


def split_frames(buf: bytes) -> Iterator[tuple[int, memoryview]]:
    """The frames inside a batch body."""
    view, pos = memoryview(buf), 0
    while pos < len(buf):
        if pos + HEADER.size > len(buf):
            raise WireError("batch ends inside a frame header")
        kind, size = HEADER.unpack_from(buf, pos)
        pos += HEADER.size
        if pos + size > len(buf):
            raise WireError("batch ends inside a frame")
        yield kind, view[pos : pos + size]
        pos += size


class FrameReader:
    """Reads frames from a QUIC stream in large pieces (few FFI calls, little CPU per byte)."""

    def __init__(self, stream: Readable, *, pace_s: float = PACE_S) -> None:
        self._stream = stream
        self._buf = bytearray()
        self._pace_s = pace_s
        self._size = ReadSize()

    async def _take(self, need: int) -> bytes | None:
        """Exactly `need` bytes, or None if the stream ended cleanly before any of them.

        A large body is read by `_take_large` (paced on a slow link) and joined to
        what is buffered in a single copy.
        """
        while len(self._buf) < need:
            missing = need - len(self._buf)
            if missing >= _EXACT_MIN:
                return await self._take_large(missing)
            piece = await self._stream.read(self._size.now)
            if not piece:
                if self._buf or need == 0:
                    raise StreamEnded("stream ended inside a frame")
                return None
            self._size.after(len(piece))
            self._buf += piece
        out = bytes(memoryview(self._buf)[:need])
        del self._buf[:need]
        return out

    async def _take_large(self, missing: int) -> bytes:
        """The buffer plus the next `missing` bytes, joined in a single copy.

        The binding wakes Python for every packet that arrives while a read waits, so
        on a slow link one `read_exact` of a large body costs a wake-up per ~1.2 KB
        (about 20 % of the receiver's CPU at 100 Mbit). A read returning a small piece
        means the data trickles in: sleep a few ms so the next read takes many packets
        at once. A large piece means a fast link: the rest comes by one `read_exact`.
        """
        parts: list[bytes] = [bytes(self._buf)] if self._buf else []
        self._buf.clear()
        while missing > 0:  # at most FAST a look: the binding zeroes what a read asks for
            piece = await self._read(min(missing, FAST), exact=False)
            parts.append(piece)
            missing -= len(piece)
            if missing and len(piece) >= FAST:
                parts.append(await self._read(missing, exact=True))
                break
            if missing and len(piece) < TRICKLE and self._pace_s > 0:
                await asyncio.sleep(self._pace_s)
        return b"".join(parts) if len(parts) > 1 else parts[0]

    async def _read(self, size: int, *, exact: bool) -> bytes:
        try:
            piece = await (self._stream.read_exact if exact else self._stream.read)(size)
        except Exception as exc:
            raise StreamEnded(f"stream ended inside a frame: {exc}") from None
        if not piece:
            raise StreamEnded("stream ended inside a frame")
        return piece

    async def next_frame(self) -> tuple[int, bytes] | None:
        """The next (kind, body), or None at a clean end of stream."""
        head = await self._take(HEADER.size)
        if head is None:
            return None
        kind, size = HEADER.unpack(head)
        if size > MAX_FRAME:
            raise WireError(f"frame of {size} bytes exceeds {MAX_FRAME}")
        body = await self._take(size) if size else b""
        if body is None:
            raise StreamEnded("stream ended inside a frame")
        return kind, body

    def leftover(self) -> bytes:
        """What was read past the last frame, handed to whoever reads the stream next."""
        out = bytes(self._buf)
        self._buf.clear()
        return out

    async def next_meta(self) -> dict[str, Any] | None:
        """The next frame, which must be a meta frame; None at a clean end of stream."""
        got = await self.next_frame()
        if got is None:
            return None
        kind, body = got
        if kind != META:
            raise WireError(f"expected a meta frame, got kind {kind}")
        return parse_meta(body)
