"""Sink → a directory: the files a manifest lists, each checked against its SHA-256.

A file is written beside its place and renamed in only once its size and digest match
the manifest (a big file's parts are fetched several at once into their places in it,
then the whole is hashed), so a reader never meets a torn or foreign file under an output's name.
Paths and link targets come from the manifest, which a stranger may have written: each
is checked like a transfer's (agent/transfer/safety.py) before anything is created, and
no write goes through a link. Used by the node to seed a next attempt's workdir and by
the operator to land outputs and for `swjob pull`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import BinaryIO

import obstore
from obstore.store import S3Store

from agent.sink.layout import MANIFEST, SYNCED, Manifest, output_key
from agent.sink.parts import at_once, part_count, part_key
from agent.sink.store import describe
from agent.transfer.errors import TransferError
from agent.transfer.safety import check_link_resolves, check_parents, check_relpath

FILES_AT_ONCE = 16
PARTS_AT_ONCE = 4  # of one big file
CHUNK = 8 * 1024 * 1024
PART_SUFFIX = ".swjob-sink-part"


async def read_manifest(store: S3Store, synced: bool = False) -> Manifest | None:
    """The run's manifest (or, with `synced`, its last live sync's when it has none)."""
    for name in (MANIFEST, SYNCED) if synced else (MANIFEST,):
        try:
            got = await obstore.get_async(store, name)
        except FileNotFoundError:
            continue
        return Manifest.decode(bytes(await got.bytes_async()))
    return None


async def download(
    store: S3Store, manifest: Manifest, dest: Path, bucket: str = ""
) -> dict[str, str]:
    """Land every file and link of `manifest` under `dest`; returns path → why for each one
    that did not land whole (the others are in place, verified)."""
    dest.mkdir(parents=True, exist_ok=True)
    failed: dict[str, str] = {}
    gate = asyncio.Semaphore(FILES_AT_ONCE)

    async def one(path: str, size: int, sha: str) -> None:
        async with gate:
            try:
                await _fetch(store, path, size, sha, dest, manifest.parts.get(path))
            except (TransferError, OSError) as exc:
                failed[path] = str(exc)
            except Exception as exc:
                failed[path] = describe(exc, bucket)

    await asyncio.gather(*(one(p, s, h) for p, (s, h) in manifest.files.items()))
    for path, target in manifest.links.items():
        try:
            _link(dest, path, target)
        except (TransferError, OSError) as exc:
            failed[path] = str(exc)
    return failed


async def _fetch(
    store: S3Store, path: str, size: int, sha: str, dest: Path, part_size: int | None
) -> None:
    check_relpath(path)
    (dest / path).parent.mkdir(parents=True, exist_ok=True)
    check_parents(dest, path)
    part = dest / f"{path}{PART_SUFFIX}"
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(part, flags, 0o644), "wb") as out:
        try:
            if part_size is None:
                got, digest = await _stream(store, output_key(path), out)
            else:
                await _fetch_parts(store, path, size, part_size, out.fileno())
                got, digest = size, await asyncio.to_thread(_sha256, out.fileno())
        except BaseException:
            part.unlink(missing_ok=True)
            raise
    if got != size or digest != sha:
        part.unlink(missing_ok=True)
        raise TransferError(f"verification failed for {path!r}: not the manifest's bytes")
    os.replace(part, dest / path)


async def _stream(store: S3Store, key: str, out: BinaryIO) -> tuple[int, str]:
    """One object into `out`: (bytes, SHA-256)."""
    digest, got = hashlib.sha256(), 0
    result = await obstore.get_async(store, key)
    async for chunk in result.stream(min_chunk_size=CHUNK):
        data = memoryview(chunk)
        digest.update(data)
        got += len(data)
        out.write(data)
    return got, digest.hexdigest()


async def _fetch_parts(store: S3Store, path: str, size: int, part_size: int, fd: int) -> None:
    """Each part of a big file written at its place in `fd`, PARTS_AT_ONCE at a time; a
    part of another length than the manifest's is refused."""
    gate = asyncio.Semaphore(PARTS_AT_ONCE)

    async def one(index: int) -> None:
        async with gate:
            start = offset = index * part_size
            result = await obstore.get_async(store, part_key(path, index))
            async for chunk in result.stream(min_chunk_size=CHUNK):
                view = memoryview(chunk)
                if offset + len(view) > start + part_size:
                    break
                while view:
                    written = os.pwrite(fd, view, offset)
                    offset, view = offset + written, view[written:]
            if offset != min(size, start + part_size):
                why = f"part {index} is not the manifest's length"
                raise TransferError(f"verification failed for {path!r}: {why}")

    async with at_once() as group:
        for index in range(part_count(size, part_size)):
            group.create_task(one(index))


def _sha256(fd: int) -> str:
    digest, offset = hashlib.sha256(), 0
    while block := os.pread(fd, CHUNK, offset):
        digest.update(block)
        offset += len(block)
    return digest.hexdigest()


def _link(dest: Path, path: str, target: str) -> None:
    check_relpath(path)
    (dest / path).parent.mkdir(parents=True, exist_ok=True)
    check_parents(dest, path)
    check_link_resolves(dest, path, target)
    if os.path.lexists(dest / path):
        os.unlink(dest / path)
    os.symlink(target, dest / path)
