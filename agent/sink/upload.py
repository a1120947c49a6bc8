"""Node → sink: put the declared outputs in the run's prefix, verified, then the manifest.

Only what changed goes: a file whose size and modification time are those of the version
already put (this agent's record) is not read again, and one the store already holds
whole (a listing's size and MD5 ETag: an upload cut short and begun anew, a seeded
workdir) is not sent again. Small files are read once, hashed and put in one request
whose ETag proves the bytes arrived; big ones go as parallel multipart uploads while a
thread hashes them, and the object's size is checked after. A file that fails is tried
again (the client already retries each request), then named in the manifest's
`not_landed` with its reason; the others still go. The manifest is written last.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import io
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import obstore

from agent.protocol import SinkDone, SinkTarget
from agent.sink.layout import MANIFEST, OUTPUTS, SYNCED, Manifest, output_key
from agent.sink.store import describe, open_store
from agent.transfer.safety import open_for_read
from agent.transfer.walk import Entry, resolve_outputs

SMALL = 8 * 1024 * 1024  # put in one request; above it, multipart
PART = 16 * 1024 * 1024
PARTS_AT_ONCE = 8
SMALL_AT_ONCE = 32
BIG_AT_ONCE = 4
INLINE_READ = 64 * 1024  # read on the loop itself: a thread hand-off costs more
TRIES = 3
BACKOFF_S = 0.5
CHANGED = "changed during upload"
_MD5 = re.compile(r'^"?([0-9a-f]{32})"?$')


@dataclass
class Meter:
    """How far the current upload is: files and bytes to consider, and put (or found held)."""

    files_total: int = 0
    bytes_total: int = 0
    files_done: int = 0
    bytes_done: int = 0


class _Counting(io.RawIOBase):
    """A file as obstore reads it part by part, each read counted on the meter: a big
    file's progress shows while its parts go up, not only once it is whole."""

    def __init__(self, raw: io.BufferedReader, meter: Meter) -> None:
        super().__init__()
        self._raw, self._meter = raw, meter
        self.counted = 0  # taken back off the meter once the file is done with

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self.counted += len(data)
        self._meter.bytes_done += len(data)
        return data


class NotLanded(Exception):
    """One file could not be put whole; the message is the manifest's reason."""


@dataclass(frozen=True)
class Report:
    manifest: Manifest
    sent_files: int
    sent_bytes: int
    error: str | None = None  # the manifest could not be written: the set is vouched for by none

    def event(self, op: str, id: int = 0) -> SinkDone:
        m = self.manifest
        return SinkDone(
            seq=0,
            op=op,  # type: ignore[arg-type]
            id=id,
            files=len(m.files),
            bytes=m.bytes,
            sent_files=self.sent_files,
            sent_bytes=self.sent_bytes,
            not_landed=m.not_landed,
            complete=m.complete and self.error is None,
            error=self.error,
        )


class Uploader:
    """One run's uploads from one node: remembers what the sink holds, one upload at a time."""

    def __init__(self, target: SinkTarget, workdir: Path) -> None:
        self.target = target
        self.workdir = workdir
        self.store = open_store(target)
        self._put: dict[str, tuple[int, int, str]] = {}  # path → (size, mtime_ns, sha256)
        self._remote: dict[str, tuple[int, str]] | None = None  # path → (size, md5) listed
        self._lock = asyncio.Lock()
        self._small = asyncio.Semaphore(SMALL_AT_ONCE)
        self._big = asyncio.Semaphore(BIG_AT_ONCE)
        self.meter = Meter()

    async def upload(self, final: bool) -> Report:
        """Put what changed; then `manifest.json` (final) or `synced.json` (a live sync)."""
        async with self._lock:
            walk, missing = await asyncio.to_thread(
                resolve_outputs, self.workdir, self.target.patterns
            )
            if self._remote is None:
                self._remote = await self._listed()
            manifest = Manifest(missing=missing, refused=walk.refused)
            sent = [0, 0]
            files = [e for e in walk.entries if e.kind == "file"]
            self.meter = Meter(len(files), sum(e.size for e in files))
            manifest.links.update(
                (e.path, e.target or "") for e in walk.entries if e.kind == "link"
            )
            await asyncio.gather(*(self._one(e, manifest, sent) for e in files))
            manifest.complete = final and not manifest.not_landed and not manifest.refused
            name = MANIFEST if final else SYNCED
            try:
                await obstore.put_async(self.store, name, manifest.encode())
            except Exception as exc:
                why = f"{name} not written: {describe(exc, self.target.bucket)}"
                return Report(manifest, sent[0], sent[1], why)
            return Report(manifest, sent[0], sent[1])

    async def _listed(self) -> dict[str, tuple[int, str]]:
        """What the store already holds under outputs/ (an earlier agent's, or a cut upload)."""
        held: dict[str, tuple[int, str]] = {}
        async for chunk in obstore.list(self.store, OUTPUTS + "/"):
            for meta in chunk:
                md5 = _MD5.match(meta.get("e_tag") or "")
                if md5:
                    held[meta["path"].removeprefix(OUTPUTS + "/")] = (meta["size"], md5.group(1))
        return held

    async def _one(self, entry: Entry, manifest: Manifest, sent: list[int]) -> None:
        known = self._put.get(entry.path)
        if known is not None and known[:2] == (entry.size, entry.mtime_ns):
            manifest.files[entry.path] = (entry.size, known[2])
            self._count(entry)
            return
        reason = ""
        for attempt in range(TRIES):
            try:
                sha, moved = await self._send(entry)
            except NotLanded as exc:
                reason = str(exc)
                entry = _restat(self.workdir, entry)  # the next try puts the version there now
            except Exception as exc:  # the store's errors, said in one line
                reason = describe(exc, self.target.bucket)
            else:
                self._put[entry.path] = (entry.size, entry.mtime_ns, sha)
                manifest.files[entry.path] = (entry.size, sha)
                if moved is not None:
                    sent[0] += 1
                    sent[1] += moved
                self._count(entry)
                return
            await asyncio.sleep(BACKOFF_S * 2**attempt)
        manifest.not_landed[entry.path] = reason
        self._count(entry)

    def _count(self, entry: Entry) -> None:
        """One file is done with (put, found held, or given up)."""
        self.meter.files_done += 1
        self.meter.bytes_done += entry.size

    async def _send(self, entry: Entry) -> tuple[str, int | None]:
        """(sha256, bytes sent — None: the sink held it already), put whole or not at all."""
        if entry.size <= SMALL:
            async with self._small:
                return await self._send_small(entry)
        async with self._big:
            return await self._send_big(entry)

    async def _send_small(self, entry: Entry) -> tuple[str, int | None]:
        if entry.size <= INLINE_READ:
            data = _read(self.workdir, entry)
        else:
            data = await asyncio.to_thread(_read, self.workdir, entry)
        sha = hashlib.sha256(data).hexdigest()
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        if self._remote and self._remote.get(entry.path) == (len(data), md5):
            return sha, None  # already whole in the sink: an earlier upload's
        put = await obstore.put_async(self.store, output_key(entry.path), data, use_multipart=False)
        etag = _MD5.match(put.get("e_tag") or "")
        if etag and etag.group(1) != md5:
            raise NotLanded(f"verification failed: the store holds other bytes than {md5}")
        return sha, len(data)

    async def _send_big(self, entry: Entry) -> tuple[str, int | None]:
        fd = open_for_read(self.workdir, entry.path)
        with os.fdopen(fd, "rb") as raw:
            reader = _Counting(raw, self.meter)
            put = obstore.put_async(
                self.store,
                output_key(entry.path),
                reader,
                chunk_size=PART,
                max_concurrency=PARTS_AT_ONCE,
            )
            try:
                sha, _ = await asyncio.gather(asyncio.to_thread(_hash, self.workdir, entry), put)
            finally:  # the parts read were shown as they went; the file counts once, done
                self.meter.bytes_done -= reader.counted
        meta = await obstore.head_async(self.store, output_key(entry.path))
        if meta["size"] != entry.size:
            raise NotLanded(f"verification failed: {meta['size']} bytes in the store")
        _unchanged(self.workdir, entry)
        return sha, entry.size


def _read(workdir: Path, entry: Entry) -> bytes:
    fd = open_for_read(workdir, entry.path)
    with os.fdopen(fd, "rb") as reader:
        data = reader.read()
        st = os.fstat(fd)
    if len(data) != entry.size or (st.st_size, st.st_mtime_ns) != (entry.size, entry.mtime_ns):
        raise NotLanded(CHANGED)
    return data


def _restat(workdir: Path, entry: Entry) -> Entry:
    """`entry` as the file is now (a job rewrote it while it was read)."""
    try:
        st = os.lstat(workdir / entry.path)
    except OSError:
        return entry
    return dataclasses.replace(entry, size=st.st_size, mtime_ns=st.st_mtime_ns)


def _hash(workdir: Path, entry: Entry) -> str:
    digest = hashlib.sha256()
    fd = open_for_read(workdir, entry.path)
    with os.fdopen(fd, "rb") as reader:
        while block := reader.read(PART):
            digest.update(block)
    return digest.hexdigest()


def _unchanged(workdir: Path, entry: Entry) -> None:
    """The file is still the version listed: a job rewriting it mid-upload is caught."""
    st = os.lstat(workdir / entry.path)
    if (st.st_size, st.st_mtime_ns) != (entry.size, entry.mtime_ns):
        raise NotLanded(CHANGED)


async def sync_every(
    uploader: Uploader, every: float, busy: Callable[[], bool], emit: Callable[[SinkDone], object]
) -> None:
    """The node's live sync: every `every` seconds while a step runs, put what changed and
    say so (nothing changed: nothing said). A failed sync is said and tried next time."""
    while True:
        await asyncio.sleep(every)
        if not busy():
            continue
        try:
            report = await uploader.upload(final=False)
        except Exception as exc:
            emit(SinkDone(seq=0, op="sync", error=describe(exc, uploader.target.bucket)))
            continue
        if report.sent_files or report.manifest.not_landed or report.error:
            emit(report.event("sync"))
