"""Node → sink: put the declared outputs in the run's prefix, verified, then the manifest.

Only what changed goes: a file whose size and modification time are those of the version
already put (this agent's record) is not read again, and one the store already holds
whole (a listing's size and MD5 ETag: an upload cut short and begun anew, a seeded
workdir) is not sent again. Small files are read once, hashed and put in one request
whose ETag proves the bytes arrived; big ones go as part objects, several at once, each
proved by its own ETag (agent/sink/parts.py), and a part the store already holds with
the same bytes is not sent again: an upload cut mid-file (the node's agent killed, its
connection cut) resumes from the parts it put. A file that fails is tried
again (the client already retries each request), then named in the manifest's
`not_landed` with its reason; the others still go. The manifest is written last.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import obstore

from agent.protocol import SinkDone, SinkTarget
from agent.sink.layout import MANIFEST, OUTPUTS, SYNCED, Manifest, output_key
from agent.sink.parts import PARTS, at_once, parse_part_key, part_count, part_key
from agent.sink.store import describe, open_store
from agent.transfer.safety import open_for_read
from agent.transfer.walk import Entry, resolve_outputs

SMALL = 8 * 1024 * 1024  # put in one request; above it, in parts
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
        self._put: dict[str, tuple[int, int, str, int]] = {}
        """path → (size, mtime_ns, sha256, part size: 0 for one object) of what was put"""
        self._remote: dict[str, tuple[int, str]] | None = None  # path → (size, md5) listed
        self._parts: dict[str, dict[int, tuple[int, str]]] = {}
        """path → {index: (size, md5)}: the parts the store holds (listed, or put since)"""
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
        """What the store already holds under outputs/ and parts/ (an earlier agent's, or
        a cut upload's)."""
        held: dict[str, tuple[int, str]] = {}
        for top in (OUTPUTS, PARTS):
            async for chunk in obstore.list(self.store, top + "/"):
                for meta in chunk:
                    if not (md5 := _MD5.match(meta.get("e_tag") or "")):
                        continue
                    kept = (meta["size"], md5.group(1))
                    if top == OUTPUTS:
                        held[meta["path"].removeprefix(OUTPUTS + "/")] = kept
                    elif part := parse_part_key(meta["path"]):
                        self._parts.setdefault(part[0], {})[part[1]] = kept
        return held

    async def _one(self, entry: Entry, manifest: Manifest, sent: list[int]) -> None:
        known = self._put.get(entry.path)
        if known is not None and known[:2] == (entry.size, entry.mtime_ns):
            self._list(manifest, entry, known[2], known[3])
            self._count(entry)
            return
        reason = ""
        for attempt in range(TRIES):
            try:
                sha, moved, part_size = await self._send(entry)
            except NotLanded as exc:
                reason = str(exc)
                entry = _restat(self.workdir, entry)  # the next try puts the version there now
            except Exception as exc:  # the store's errors, said in one line
                reason = describe(exc, self.target.bucket)
            else:
                self._put[entry.path] = (entry.size, entry.mtime_ns, sha, part_size)
                self._list(manifest, entry, sha, part_size)
                if moved is not None:
                    sent[0] += 1
                    sent[1] += moved
                self._count(entry)
                return
            await asyncio.sleep(BACKOFF_S * 2**attempt)
        manifest.not_landed[entry.path] = reason
        self._count(entry)

    @staticmethod
    def _list(manifest: Manifest, entry: Entry, sha: str, part_size: int) -> None:
        manifest.files[entry.path] = (entry.size, sha)
        if part_size:
            manifest.parts[entry.path] = part_size

    def _count(self, entry: Entry) -> None:
        """One file is done with (put, found held, or given up)."""
        self.meter.files_done += 1
        self.meter.bytes_done += entry.size

    async def _send(self, entry: Entry) -> tuple[str, int | None, int]:
        """(sha256, bytes sent — None: the sink held it already, part size — 0: one
        object), put whole or not at all."""
        if entry.size <= SMALL:
            async with self._small:
                return (*await self._send_small(entry), 0)
        async with self._big:
            return (*await self._send_big(entry), PART)

    async def _send_small(self, entry: Entry) -> tuple[str, int | None]:
        if entry.size <= INLINE_READ:
            data = _read(self.workdir, entry)
        else:
            data = await asyncio.to_thread(_read, self.workdir, entry)
        sha = hashlib.sha256(data).hexdigest()
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        if self._remote and self._remote.get(entry.path) == (len(data), md5):
            return sha, None  # already whole in the sink: an earlier upload's
        await self._put_proved(output_key(entry.path), data, md5)
        return sha, len(data)

    async def _put_proved(self, key: str, data: bytes, md5: str) -> None:
        """One request, whose MD5 ETag proves the store holds these very bytes."""
        put = await obstore.put_async(self.store, key, data, use_multipart=False)
        etag = _MD5.match(put.get("e_tag") or "")
        if etag and etag.group(1) != md5:
            raise NotLanded(f"verification failed: the store holds other bytes than {md5}")

    async def _send_big(self, entry: Entry) -> tuple[str, int | None]:
        """Put the parts the store lacks, PARTS_AT_ONCE at a time, reading the file once,
        in order, for its SHA-256 and each part's MD5; the parts it holds already (same
        size, same MD5) are not sent."""
        held = self._parts.setdefault(entry.path, {})
        whole, gate = hashlib.sha256(), asyncio.Semaphore(PARTS_AT_ONCE)
        count, sent, shown = part_count(entry.size, PART), [0], [0]

        async def put(index: int, data: bytes, md5: str) -> None:
            try:
                await self._put_proved(part_key(entry.path, index), data, md5)
                held[index] = (len(data), md5)
                sent[0] += len(data)
                self._show(shown, len(data))
            finally:
                gate.release()

        fd = open_for_read(self.workdir, entry.path)
        try:
            async with at_once() as group:
                for index in range(count):
                    await gate.acquire()
                    data, md5 = await asyncio.to_thread(_read_part, fd, entry, index, whole)
                    if held.get(index) != (len(data), md5):
                        group.create_task(put(index, data, md5))
                        continue
                    gate.release()  # the store has this part's very bytes
                    self._show(shown, len(data))
        finally:  # the parts were shown as they went; the file counts once, done
            os.close(fd)
            self.meter.bytes_done -= shown[0]
        _unchanged(self.workdir, entry)
        if stale := [i for i in held if i >= count]:  # a longer version's tail: unread now
            await obstore.delete_async(self.store, [part_key(entry.path, i) for i in stale])
            for index in stale:
                del held[index]
        return whole.hexdigest(), sent[0] or None

    def _show(self, shown: list[int], size: int) -> None:
        """A big file's part is done with: its progress shows while the rest go."""
        shown[0] += size
        self.meter.bytes_done += size


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


def _read_part(fd: int, entry: Entry, index: int, whole: hashlib._Hash) -> tuple[bytes, str]:
    """Part `index` of the file, fed to its SHA-256 (parts are read in order), and its MD5;
    a file shorter than listed was rewritten while read."""
    offset = index * PART
    data = os.pread(fd, min(PART, entry.size - offset), offset)
    if len(data) != min(PART, entry.size - offset):
        raise NotLanded(CHANGED)
    whole.update(data)
    return data, hashlib.md5(data, usedforsecurity=False).hexdigest()


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
