"""Sink → a directory: the files a manifest lists, each checked against its SHA-256.

A file is written beside its place and renamed in only once its size and digest match
the manifest, so a reader never meets a torn or foreign file under an output's name.
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

import obstore
from obstore.store import S3Store

from agent.sink.layout import MANIFEST, SYNCED, Manifest, output_key
from agent.sink.store import describe
from agent.transfer.errors import TransferError
from agent.transfer.safety import check_link_resolves, check_parents, check_relpath

FILES_AT_ONCE = 16
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
                await _fetch(store, path, size, sha, dest)
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


async def _fetch(store: S3Store, path: str, size: int, sha: str, dest: Path) -> None:
    check_relpath(path)
    (dest / path).parent.mkdir(parents=True, exist_ok=True)
    check_parents(dest, path)
    part = dest / f"{path}{PART_SUFFIX}"
    digest, got = hashlib.sha256(), 0
    result = await obstore.get_async(store, output_key(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(part, flags, 0o644), "wb") as out:
        try:
            async for chunk in result.stream(min_chunk_size=CHUNK):
                data = memoryview(chunk)
                digest.update(data)
                got += len(data)
                out.write(data)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
    if got != size or digest.hexdigest() != sha:
        part.unlink(missing_ok=True)
        raise TransferError(f"verification failed for {path!r}: not the manifest's bytes")
    os.replace(part, dest / path)


def _link(dest: Path, path: str, target: str) -> None:
    check_relpath(path)
    (dest / path).parent.mkdir(parents=True, exist_ok=True)
    check_parents(dest, path)
    check_link_resolves(dest, path, target)
    if os.path.lexists(dest / path):
        os.unlink(dest / path)
    os.symlink(target, dest / path)
