"""A chunk's bytes on the receiving side: verified off the wire, read back before landing.

An all-zero chunk travels as its hash alone (`zero`) and is not written, so the
`.part` file keeps a hole there; reading it back for the final check does not touch
the disk either, as long as it is still a hole.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from agent.transfer import wire
from agent.transfer.compress import decompress
from agent.transfer.errors import TransferError
from agent.transfer.schedule import CHUNK
from agent.transfer.zeros import ZEROS, zero_sha


def chunk_data(
    meta: dict[str, Any], payload: bytes | None, length: int, digest: str, *, verify: bool
) -> bytes | None:
    """The chunk's bytes, or None for an all-zero chunk (nothing to write). With `verify`
    they are checked against `digest` here; without it the caller re-reads the landed
    file against the chunk hashes before it takes its name (hashing each byte once)."""
    if meta.get("zero") is True:
        if payload is not None or digest != zero_sha(length):
            raise wire.WireError(f"bad zero chunk for {meta.get('p')!r}")
        return None
    payload = payload if payload is not None else b""
    data = decompress(payload, length) if meta.get("z") else bytes(payload)
    if len(data) != length or (verify and hashlib.sha256(data).hexdigest() != digest):
        where = f"{meta.get('p')!r}: chunk {meta.get('i')}"
        raise TransferError(f"verification failed for {where} does not match")
    return data


def read_back(fd: int, index: int, size: int, digest: str | None) -> tuple[bytes, bool]:
    """A landed chunk's bytes for the final check, and whether they are known zeros: a
    chunk that should be, and still is, all hole is not read (nor need it be re-hashed)."""
    start = index * CHUNK
    length = min(CHUNK, size - start)
    if digest == zero_sha(length):
        try:
            hole = os.lseek(fd, start, os.SEEK_DATA) >= start + length
        except OSError:  # ENXIO: only hole from `start` on
            hole = True
        if hole:
            return ZEROS[:length], True
    return os.pread(fd, length, start), False
