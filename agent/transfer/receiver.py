"""Landing records under a root: verified, atomic, resumable, and never outside the root.

Every file's bytes are checked against the sender's before the file takes its final
name (temporary name, then rename; or, `staged`, a new directory holding it renamed into
place once all landed); a mismatch is an error naming the file. A small
file travels whole with its SHA-256. A large file arrives as chunks written at their
offsets into a `.part` file (zero runs are left as holes, so sparse files land sparse),
each checked against its own CRC-32 (why not a SHA-256: agent/transfer/chunkdata.py):
off the wire, or, when landing outputs, by re-reading the whole `.part` file once it is
complete (one pass that also hashes it whole with SHA-256 for the manifest, and catches
a byte changed on disk after its chunk landed). The receiver remembers which chunks
it holds, so a retried transfer sends only the rest.

Some files cannot land and the rest still should: the sender says so with a `skip`
record (vanished, unreadable, changed while read), and chunks read from different
versions of one file (their `v` differs) are never put together. Those are recorded
in `failed` with a one-line reason and the partial is dropped. With `per_file`
(operator side: outputs) a file that fails verification, does not fit the landing
disk (checked before it is created) or cannot be written is recorded the same way;
without it (node side: the workspace) those end the transfer. A malformed or unsafe
record always ends it: that is a hostile or broken peer, not a file.

Writes run in worker threads while the next frames are read from the network. A
batch of small files is landed by several writers at once (`WRITERS` contiguous
slices, so each writer mostly works in its own directories): creating a file is
kernel work that releases the GIL, and on ext4 after a recent delete each
`open(O_CREAT)` scans past the recently freed inodes (hundreds of µs per file), so
a single writer makes the receiver, not the link, the bottleneck. The batches of a
long transfer (a push's on the node, a pull's on the operator: `landers_after`) land in
helper processes instead, where no GIL is handed between writers on every syscall
(landproc.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import os
import threading
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.transfer import landproc, wire
from agent.transfer.chunkdata import CRC_MAX, chunk_data, read_back
from agent.transfer.compress import decompress
from agent.transfer.errors import TransferError, UnsafePath
from agent.transfer.landing import Lander
from agent.transfer.memory import pin_malloc
from agent.transfer.safety import check_relpath
from agent.transfer.schedule import CHUNK, chunk_count
from agent.transfer.sender import CHANGED, Changed
from agent.transfer.space import NoSpace, SpaceGuard
from agent.transfer.wire import FrameReader

log = logging.getLogger("swjob.agent")

_QUEUE = 2
WRITERS = 4
_PARALLEL_MIN = 2 * WRITERS  # fewer records than this are not worth splitting
OnLanded = Callable[[int, int, str | None], None]  # (bytes, whole files, current path)
Meta = dict[str, Any] | wire.FileMeta
Data = bytes | memoryview | None
Record = tuple[Meta, Data]


@dataclass(slots=True)  # no __dict__, not frozen: one cheap object a file (walk.Entry)
class Landed:
    """A file that arrived and verified; `sha256` is None for a chunked file nobody hashed whole."""

    path: str
    size: int
    mode: int
    sha256: str | None


@dataclass
class _Partial:
    size: int
    mode: int
    mtime_ns: int
    fd: int
    version: object  # the sender's `v` of the file its first chunk was read from
    done: set[int] = field(default_factory=set)
    crcs: dict[int, int] = field(default_factory=dict)  # verified chunk → its CRC-32


def _int(meta: dict[str, Any], key: str, low: int = 0, high: int = 1 << 62) -> int:
    value = meta.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise wire.WireError(f"bad field {key!r} in {meta.get('t')} record for {meta.get('p')!r}")
    return value


def _sha(meta: dict[str, Any]) -> str:
    value = meta.get("h")
    if not isinstance(value, str) or len(value) != 64:
        raise wire.WireError(f"bad hash in record for {meta.get('p')!r}")
    return value


class Receiver:
    """The receiving side of one transfer session, kept across reconnects for resume.

    `hash_chunked`: outputs. A completed chunked file is re-read against its chunks'
    CRCs before it takes its name and hashed whole in the same pass: the manifest
    wants every file's SHA-256 and must never vouch for bytes changed after they landed;
    where the sender gave the file's whole SHA-256 (`expected_sha256`), it must match.
    Without it (a workspace push, into a workdir nothing else writes to before the job
    starts) each chunk is verified off the wire and not read again.
    `per_file`: a file that cannot land is recorded in `failed`, the rest goes on.
    `in_place`: small files may be created straight under their names (landing.py).
    `staged`: what lands in directories the root does not hold yet is landed unseen in a
    staging directory and renamed into place at `close` (landing.py).
    `landers_after`: batches after the first `landers_after` are landed in helper
    processes, not the writer threads (landproc.py), which start as the second batch
    comes. A transfer of one or two batches (most workspaces: code and configs; most
    outputs) starts none; each costs ~0.17 s of CPU, and a hundred local nodes would have
    started two hundred of them. A lander lands a batch as this receiver would: into the
    same stage (`staged`), each small file's room checked against the disk with what this
    receiver's guard has promised counted (`per_file`: see landproc.py). A batch whose
    lander died may have left a file half written in the stage: such files are removed
    before it is published.
    `stage`: a lander's receiver lands its new directories in this stage, its caller's.
    """

    def __init__(
        self,
        root: Path,
        *,
        hash_chunked: bool = False,
        per_file: bool = False,
        in_place: bool = False,
        staged: bool = False,
        landers_after: int | None = None,
        stage: str | None = None,
    ) -> None:
        self.root = root
        self.hash_chunked = hash_chunked
        self.verified: dict[str, Landed] = {}
        self.failed: dict[str, str] = {}  # path → why it did not land
        self._space = SpaceGuard(root) if per_file else None
        self._partials: dict[str, _Partial] = {}
        self._dropped: list[int] = []  # descriptors of given-up partials, closed at close()
        self._lock = threading.Lock()
        self._lander = Lander(root, in_place=in_place, staged=staged, stage=stage)
        self._inflight: set[Future[tuple[int, int, str | None]]] = set()
        self._closed = False
        self.refused: list[str] = []  # links removed at close: they resolved outside the root
        self.expected_sha256: dict[str, str] = {}  # path → the sender's whole-file SHA-256
        self._token = next(_tokens) if landers_after is not None else None
        self._landers_after = landers_after or 0
        self._batches = 0  # batches this receiver was handed (all its streams, every attempt)
        self._lost = False  # a lander died under one of its batches
        self._warming: asyncio.Future[None] | None = None
        pin_malloc()

    def forget_failed(self, paths: Iterable[str] | None = None) -> None:
        """Let failed files (all, or `paths`) be sent again: a new attempt starts."""
        with self._lock:
            for path in list(self.failed) if paths is None else paths:
                self.failed.pop(path, None)

    def _unplaced(self, rel: str, why: str) -> None:
        """Every file verified under directory `rel` is not an output after all: failed."""
        under = f"{rel}/"
        for path in [p for p in self.verified if p.startswith(under)]:
            del self.verified[path]
            self.failed[path] = why

    def reserve(self, nbytes: int) -> None:
        """In a lander: `nbytes` are promised by the caller's own guard on this disk."""
        if self._space is not None:
            self._space.elsewhere = nbytes

    def chunks_held(self) -> dict[str, set[int]]:
        with self._lock:
            return {p: set(part.done) for p, part in self._partials.items()}

    def close(self, *, discard_partials: bool = False) -> None:
        """Release partial files' descriptors. Their `.part` files stay for a later look,
        or are removed with `discard_partials` (a transfer that will not resume). What a
        `staged` receiver landed goes into place (a file whose directory cannot is failed,
        not verified). Links that resolve outside the root through the others are removed
        (`refused`).

        A writer thread may still be landing a record of a stream that was cancelled when
        the connection dropped, or a lander a batch: it is waited for (a few ms; a lander's
        batch up to what landing 4 MiB takes), so no descriptor is closed under a write
        and no `.part` file appears after this returns."""
        with self._lock:
            self._closed = True
            running = list(self._inflight)
        wait_futures(running)
        with self._lock:
            for path, part in self._partials.items():
                os.close(part.fd)
                if discard_partials:
                    self._lander.discard_part(path)
            self._partials.clear()
            for fd in self._dropped:
                os.close(fd)
            self._dropped.clear()
            if self._lost:
                self._lander.drop_unverified(self.verified)
            for rel, why in self._lander.publish().items():
                self._unplaced(rel, why)
        if self._lander.made_links:  # what each link means is known only once all landed
            self.refused = self._lander.drop_escaping_links()

    async def receive(self, reader: FrameReader, on_landed: OnLanded) -> dict[str, Any]:
        """Apply records until the sender's `end` record, which is returned."""
        queue: asyncio.Queue[Any] = asyncio.Queue(_QUEUE)
        applier = asyncio.create_task(self._apply_queue(queue, on_landed))
        try:
            while True:
                job, end = await self._next_job(reader)
                await _feed(queue, None if end is not None else job, applier)
                if end is not None:
                    await applier
                    return end
        finally:
            applier.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await applier

    async def _next_job(self, reader: FrameReader) -> tuple[Any, dict[str, Any] | None]:
        got = await reader.next_frame()
        if got is None:
            raise wire.StreamEnded("stream ended before the sender's end record")
        kind, body = got
        if kind in (wire.ZBATCH, wire.BATCH):
            return (kind, body), None
        if kind != wire.META:
            raise wire.WireError(f"unexpected frame kind {kind}")
        meta = wire.parse_meta(body)
        if meta["t"] == "end":
            return None, meta
        if meta["t"] == "err":
            raise TransferError(str(meta.get("msg", "the sender failed")))
        data = None
        if wire.carries_data(meta):
            got = await reader.next_frame()
            if got is None or got[0] != wire.DATA:
                raise wire.WireError(f"no data after the record for {meta.get('p')!r}")
            data = got[1]
        return [(meta, data)], None

    async def _apply_queue(self, queue: asyncio.Queue[Any], on_landed: OnLanded) -> None:
        while (job := await queue.get()) is not None:
            if isinstance(job, tuple) and self._token is not None and self._elsewhere():
                on_landed(*await self._land_elsewhere(*job))
                continue
            if isinstance(job, tuple):
                job = await asyncio.to_thread(decode_batch, *job)
            on_landed(*await self._apply_parallel(job))

    async def _apply_parallel(self, records: list[Record]) -> tuple[int, int, str | None]:
        """Apply `records` on the writer pool; the first failing slice's error is raised.

        A batch naming a path twice (only a hostile sender does) is applied by one
        writer, so two writers never race on one temporary file."""
        step = -(-len(records) // WRITERS)
        if len(records) < _PARALLEL_MIN or len({_path_of(m) for m, _ in records}) < len(records):
            step = len(records)
        slices = [self._submit(records[i : i + step]) for i in range(0, len(records), step)]
        try:
            await asyncio.wait(slices)  # every writer has stopped before an error is reported
        except asyncio.CancelledError:  # a stopped pull: the slices' ends are nobody's news
            for piece in slices:  # (asyncio logged each "exception was never retrieved")
                piece.add_done_callback(_seen)
            raise
        done = [f.result() for f in slices]
        return sum(d[0] for d in done), sum(d[1] for d in done), done[-1][2]

    def _elsewhere(self) -> bool:
        """Whether the batch just handed over goes to the landers. The second batch starts
        them (off the loop: a process start is a fork and an exec); until they have
        started, or when they could not be, batches stay in the writer threads."""
        self._batches += 1
        if self._batches == 2 and self._landers_after >= 2:
            self._warming = asyncio.ensure_future(asyncio.to_thread(landproc.warm))
            self._warming.add_done_callback(_said_if_failed)
        if self._batches <= self._landers_after:
            return False
        warming = self._warming
        return warming is None or (warming.done() and warming.exception() is None)

    async def _land_elsewhere(self, kind: int, body: bytes) -> tuple[int, int, str | None]:
        """Land a batch in a lander process (landproc.py); what landed is recorded first."""
        if self._closed:
            raise TransferError("the transfer was closed")
        space = self._space
        reserve = space.promised() if space is not None else 0
        where = landproc.Where(
            self._token or 0,
            str(self.root),
            self._lander.in_place,
            space is not None,
            self._lander.stage,
            reserve,
        )
        try:
            future = landproc.submit(where, kind, body, self._took)
            with self._lock:
                self._inflight.add(future)
            future.add_done_callback(self._forget)
            return await asyncio.wrap_future(future)
        except landproc.Lost:
            self._lost_batch()
            raise

    def _lost_batch(self) -> None:
        """What a dead lander landed of its batch is unknown: a file of it may sit half
        written in the stage (dropped at close), and it may have made a link."""
        with self._lock:
            self._lost = True
            self._lander.made_links = True

    def _took(self, landed: list[Any], failed: list[Any], made_links: bool, new: list[str]) -> None:
        """What a lander landed and verified of a batch, what did not land in it (skipped by
        the sender; refused, with `per_file`), and the new directories it made in the stage."""
        for path, size, mode, sha256 in landed:
            self.verified[path] = Landed(path, size, mode, sha256)
            self.failed.pop(path, None)
        for path, why in failed:
            self._fail(path, why)
        with self._lock:
            self._lander.made_links |= made_links
            self._lander.adopt_new(new)

    def _submit(self, job: list[Record]) -> asyncio.Future[tuple[int, int, str | None]]:
        future = _writers().submit(self._apply_job, job)
        with self._lock:
            self._inflight.add(future)
        future.add_done_callback(self._forget)
        return asyncio.wrap_future(future)

    def _forget(self, future: Future[tuple[int, int, str | None]]) -> None:
        with self._lock:
            self._inflight.discard(future)

    def _apply_job(self, job: list[Record]) -> tuple[int, int, str | None]:
        if self._closed:
            raise TransferError("the transfer was closed")
        nbytes = files = 0
        current = None
        admitted = self._admit_small(job)
        try:
            for meta, data in job:
                current = _path_of(meta)
                try:
                    got_bytes, got_file = self._apply(meta, data, admitted is not None)
                except OSError as exc:
                    error = TransferError(f"cannot write {current!r}: {exc.strerror or exc}")
                    got_bytes, got_file = self._file_failed(meta, data, error)
                except (UnsafePath, wire.WireError):
                    raise
                except TransferError as exc:
                    got_bytes, got_file = self._file_failed(meta, data, exc)
                nbytes += got_bytes
                files += got_file
        finally:
            if admitted is not None and self._space is not None:
                self._space.landed(admitted)
        return nbytes, files, current

    def _admit_small(self, job: list[Record]) -> str | None:
        """One check of the landing disk's room for all the small files of a writer's slice
        (two locked calls a file were ~5 % of landing a pulled tree of 1 KiB files): the key
        their bytes are promised under (no path holds a NUL), or None — no guard, or they do
        not all fit, and then each is checked alone, so the refusal names the file."""
        if self._space is None:
            return None
        size = sum(len(data or b"") for meta, data in job if isinstance(meta, wire.FileMeta))
        key = f"\0slice {threading.get_ident()}"
        try:
            self._space.admit(key, size)
        except NoSpace:
            return None
        return key

    def _file_failed(self, meta: Meta, data: Data, exc: TransferError) -> tuple[int, int]:
        """Record why this record's file did not land, or end the transfer without `per_file`.
        Its bytes count as moved (progress must still reach the total)."""
        if self._space is None and not isinstance(exc, Changed):
            raise exc
        path = check_relpath(_path_of(meta))
        reason = str(exc)
        prefix = f"{path!r}: "
        self._fail(path, reason[len(prefix) :] if reason.startswith(prefix) else reason)
        if isinstance(meta, wire.FileMeta):
            return len(data or b""), 1
        return _int(meta, "n", 0) if meta["t"] == "chunk" else _int(meta, "s", 0), 1

    def _fail(self, path: str, reason: str) -> None:
        """Give `path` up for this attempt. Its `.part` file goes now; its descriptor only at
        close(), as a writer may still be landing another chunk of it (a closed descriptor's
        number could be reused for another file under that write)."""
        with self._lock:
            self.failed.setdefault(path, reason)
            part = self._partials.pop(path, None)
            if part is not None:
                self._dropped.append(part.fd)
                self._lander.discard_part(path)
        if self._space is not None:
            self._space.landed(path)

    def _apply(self, meta: Meta, data: Data, admitted: bool = False) -> tuple[int, int]:
        """Land one record; `admitted`: a small file's room was checked with its slice's."""
        if isinstance(meta, wire.FileMeta):  # the common case: a small file, one frame
            landed = self._land_file(
                meta.path, meta.mode, meta.mtime_ns, meta.sha256, data, admitted
            )
            return landed, 1
        kind = meta["t"]
        path = meta.get("p")
        if kind == "dir":
            self._lander.make_dir(path, _int(meta, "m", 0, 0o7777))
            return 0, 0
        if kind == "link":
            self._lander.make_link(path, meta.get("to"))
            return 0, 0
        if kind == "file":
            return self._apply_file(meta, data or b""), 1
        if kind == "chunk":
            return self._apply_chunk(meta, data)
        if kind == "skip":
            why = meta.get("why")
            self._fail(check_relpath(path), why if isinstance(why, str) else "not sent")
            return 0, 0
        raise wire.WireError(f"unknown record type {kind!r}")

    def _apply_file(self, meta: dict[str, Any], data: bytes) -> int:
        """A `file` meta with its data frame (what `F` frames replaced; still accepted)."""
        path, size, digest = meta.get("p"), _int(meta, "s"), _sha(meta)
        mode, mtime = _int(meta, "m", 0, 0o7777), _int(meta, "mt")
        if len(data) != size:
            raise TransferError(f"verification failed for {path!r}: content does not match")
        return self._land_file(path, mode, mtime, digest, data)

    def _land_file(
        self, path: Any, mode: int, mtime: int, sha256: Any, data: Data, admitted: bool = False
    ) -> int:
        """Verify a whole small file against its SHA-256 (raw, or hex from a `file` meta)
        and land it. Per small file, so the path is checked once and hashed once; its room
        on the disk too, unless `admitted` with its slice."""
        data = data or b""
        digest = hashlib.sha256(data).digest()
        hexed = digest.hex()
        if (digest if isinstance(sha256, bytes) else hexed) != sha256:
            raise TransferError(f"verification failed for {path!r}: content does not match")
        rel, size = check_relpath(path), len(data)
        space = None if admitted else self._space
        if space is not None:
            space.admit(rel, size)
        try:
            self._lander.write_checked(rel, data, mode, mtime)
        finally:
            if space is not None:
                space.landed(rel)
        self.verified[rel] = Landed(rel, size, mode & 0o777, hexed)
        self.failed.pop(rel, None)
        return size

    def _apply_chunk(self, meta: dict[str, Any], payload: bytes | None) -> tuple[int, int]:
        path, size = check_relpath(meta.get("p")), _int(meta, "s")
        index = _int(meta, "i", 0, chunk_count(size) - 1)
        length = _int(meta, "n", 1, min(CHUNK, size - index * CHUNK))
        if path in self.failed:  # given up in this attempt: the rest of it is not kept
            return length, 0
        crc = _int(meta, "c", 0, CRC_MAX)
        data = chunk_data(meta, payload, length, crc, verify=not self.hash_chunked)
        part = self._partial(path, meta)
        written = 0 if data is None else self._lander.write_at(part.fd, data, index * CHUNK)
        if self._space is not None:
            self._space.landed(path, written)
        with self._lock:
            part.crcs[index] = crc
            part.done.add(index)
            complete = len(part.done) == chunk_count(size) and path in self._partials
            if complete:
                del self._partials[path]
        if complete:
            self._finish_chunked(path, part)
        return length, int(complete)

    def _partial(self, path: str, meta: dict[str, Any]) -> _Partial:
        """The `.part` file the chunk belongs in, made (after the space check) by its first
        chunk; a chunk of another version of the file means it changed while it was read."""
        size, mode, mtime_ns = _int(meta, "s"), _int(meta, "m", 0, 0o7777), _int(meta, "mt")
        with self._lock:
            if self._closed:
                raise TransferError("the transfer was closed")
            part = self._partials.get(path)
        if part is None:
            if self._space is not None:
                self._space.admit(path, size)
            with self._lock:
                part = self._partials.get(path)
                if part is None:
                    fd = self._lander.open_part(path, size)
                    part = _Partial(size, mode, mtime_ns, fd, meta.get("v"))
                    self._partials[path] = part
        if part.size != size or part.version != meta.get("v"):
            raise Changed(f"{path!r}: {CHANGED}")
        return part

    def _finish_chunked(self, path: str, part: _Partial) -> None:
        try:
            digest = self._reverify(path, part) if self.hash_chunked else None
            expected = self.expected_sha256.get(path)
            if digest is not None and expected is not None and digest != expected:
                raise TransferError(
                    f"verification failed for {path!r}: its SHA-256 is not the node's"
                )
            self._lander.finish_part(path, part.fd, part.mode, part.mtime_ns)
        except TransferError:
            self._lander.discard_part(path)  # changed on disk: no chunk of it can be trusted
            raise
        finally:
            os.close(part.fd)
            if self._space is not None:
                self._space.landed(path)
        self.verified[path] = Landed(path, part.size, part.mode & 0o777, digest)
        self.failed.pop(path, None)

    def _reverify(self, path: str, part: _Partial) -> str:
        """Re-read every chunk from disk against its CRC before the file takes its name: a
        byte damaged on the way or changed after its chunk landed must never become an
        output. Returns the whole file's SHA-256 (same pass, no extra read)."""
        whole = hashlib.sha256()
        for index in range(chunk_count(part.size)):
            data, still_hole = read_back(part.fd, index, part.size, part.crcs.get(index))
            if not still_hole and zlib.crc32(data) != part.crcs.get(index):
                raise TransferError(
                    f"verification failed for {path!r}: chunk {index} does not match"
                )
            whole.update(data)
        return whole.hexdigest()


async def _feed(queue: asyncio.Queue[Any], job: Any, applier: asyncio.Task[None]) -> None:
    """Queue `job` for the applier, or raise the applier's error if it failed meanwhile
    (waiting on a full queue nobody drains any more would hang the transfer)."""
    put = asyncio.ensure_future(queue.put(job))
    await asyncio.wait({put, applier}, return_when=asyncio.FIRST_COMPLETED)
    if not put.done():
        put.cancel()
    if applier.done():
        applier.result()


_pool: ThreadPoolExecutor | None = None
_tokens = itertools.count(1)  # each lander-using receiver's name in the landers
LANDERS_AFTER = 3
"""A long transfer's batches landed in the writer threads before the rest go to landers."""


def _said_if_failed(warming: asyncio.Future[None]) -> None:
    """A transfer whose landers could not start (no fork: a full process table, no memory;
    one that cannot import) lands in the writer threads, and the log says why."""
    if not warming.cancelled() and (exc := warming.exception()) is not None:
        log.warning("landing processes could not start, landing in threads: %s", exc)


def _writers() -> ThreadPoolExecutor:
    """The process's writer threads, shared by all receivers (created on first use)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(WRITERS, thread_name_prefix="swjob-land")
    return _pool


def _seen(future: asyncio.Future[Any]) -> None:
    """Retrieve a finished future's exception, so that asyncio does not log it as lost."""
    if not future.cancelled():
        future.exception()


def _path_of(meta: Meta) -> Any:
    return meta.path if isinstance(meta, wire.FileMeta) else meta.get("p")


def decode_batch(kind: int, body: bytes) -> list[Record]:
    if kind == wire.ZBATCH:
        body = decompress(body, wire.MAX_FRAME)
    return _records(body)


def _records(body: bytes) -> list[Record]:
    """The (meta, data) records inside a batch body."""
    out: list[Record] = []
    for kind, view in wire.split_frames(body):
        if kind == wire.FILE:
            out.append(wire.parse_file(view))
        elif kind == wire.DATA and out and out[-1][1] is None and wire.carries_data(out[-1][0]):
            out[-1] = (out[-1][0], bytes(view))
        elif kind == wire.META:
            meta = wire.parse_meta(bytes(view))
            if meta["t"] == "chunk":  # a chunk travels alone: landed and hashed as one
                raise wire.WireError(f"a chunk of {meta.get('p')!r} inside a batch")
            out.append((meta, None))
        else:
            raise wire.WireError(f"unexpected frame kind {kind} in a batch")
    if out and out[-1][1] is None and wire.carries_data(out[-1][0]):
        raise wire.WireError("batch ends without the data of its last file")
    return out
