"""A big output's upload cut mid-file resumes from the parts the store holds, against a
real S3 server (SeaweedFS) behind a TCP hop that counts the bytes going to it and can
cut every connection: the same agent retrying after its connection came back, and a new
agent (the node's agent killed and started again) each send only the parts the store
lacks, and the file lands whole, verified by SHA-256."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import obstore
import pytest

from agent.sink import upload as up
from agent.sink.download import download, read_manifest
from agent.sink.parts import PARTS
from agent.sink.store import open_store
from agent.sink.upload import Uploader
from tests.support.s3 import Bucket

PART = 128 * 1024
SIZE = 15 * PART + 1000  # 16 parts, the last one short
ROOM = 64 * 1024  # beyond the bodies (headers, a listing, the manifest): less than a part


class Hop:
    """Between the uploader and the store: counts the bytes sent to the store and, once
    `cut_after` of them have passed, cuts every connection and refuses new ones."""

    def __init__(self, store: str) -> None:
        parts = urlsplit(store)
        self._host, self._port = parts.hostname or "", parts.port or 80
        self.sent = 0
        self.cut_after: int | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def cut(self) -> bool:
        return self.cut_after is not None and self.sent >= self.cut_after

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut():
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
        self._open |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer, True), self._pipe(up_reader, writer))

    async def _pipe(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, counted: bool = False
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await src.read(64 * 1024):
                if counted:
                    self.sent += len(data)
                if self.cut():
                    for writer in self._open:  # the network went: every connection at once
                        writer.transport.abort()
                    return
                dst.write(data)
                await dst.drain()
        dst.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Hop]:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        try:
            yield self
        finally:
            for writer in self._open:
                writer.transport.abort()
            self._server.close()


async def held_parts(s3: Bucket, prefix: str) -> int:
    """How many bytes of part objects the store holds for the run."""
    listed = await obstore.list(open_store(s3.target(prefix=prefix)), PARTS + "/").collect_async()
    return sum(meta["size"] for meta in listed)


@pytest.mark.parametrize("retry", ["the same agent", "a new agent"])
async def test_a_cut_upload_resumes_from_the_parts_the_store_holds(
    retry: str, s3: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection is cut a third of the way into the file; the retry (once it is
    back) sends exactly the bytes the store lacks, and the file lands verified."""
    monkeypatch.setattr(up, "SMALL", PART)  # a small file, cut into many parts
    monkeypatch.setattr(up, "PART", PART)
    monkeypatch.setattr(up, "PARTS_AT_ONCE", 1)  # each part answered before the next: the
    monkeypatch.setattr(up, "BACKOFF_S", 0.01)  # cut falls in one part, deterministically
    work = tmp_path / "work"
    work.mkdir()
    data = os.urandom(SIZE)
    (work / "model.bin").write_bytes(data)
    prefix = "results/job/r1"
    async with Hop(s3.server.endpoint).running() as hop:
        target = s3.target(prefix=prefix, patterns=["model.bin"])
        target = target.model_copy(update={"endpoint": hop.endpoint})
        agent = Uploader(target, work)
        agent.store = open_store(target, retries=0)  # the cut is not retried away

        hop.cut_after = SIZE // 3
        cut = await agent.upload(final=True)
        assert "model.bin" in cut.manifest.not_landed and cut.error is not None
        held = await held_parts(s3, prefix)
        assert SIZE // 3 - PART - ROOM <= held < SIZE // 3, held

        hop.cut_after, before = None, hop.sent  # the network is back
        if retry == "a new agent":  # the node's agent was killed and started again
            agent = Uploader(target, work)
        done = await agent.upload(final=True)
        lacking = SIZE - held
        assert done.manifest.complete and done.sent_bytes == lacking
        assert lacking <= hop.sent - before <= lacking + ROOM, "held parts went again"

    store = open_store(s3.target(prefix=prefix))
    manifest = await read_manifest(store)
    assert manifest is not None and manifest.parts == {"model.bin": PART}
    assert await download(store, manifest, tmp_path / "landed") == {}
    landed = (tmp_path / "landed" / "model.bin").read_bytes()
    assert hashlib.sha256(landed).hexdigest() == hashlib.sha256(data).hexdigest()
