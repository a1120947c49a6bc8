"""A chunk's bytes on the receiving side: checked off the wire, read back before landing.

A chunk is checked by the CRC-32 of its bytes, not a SHA-256. Nothing on the way can
change them unnoticed: QUIC authenticates every packet (TLS 1.3 AEAD), and the only
peer that could forge a match is the sender, which chooses the bytes anyway. What the
check is for is a mistake of our own (a chunk framed, decompressed or placed wrong) or a
byte changed on disk after it landed, and CRC-32 catches those at 5 GB/s a core where
SHA-256 ran at 1-1.8 GB/s, on each side of every large file. Whole files keep their
SHA-256 where one is recorded: small files on the wire, outputs in the manifest.

An all-zero chunk travels as its CRC alone (`zero`) and is not written, so the `.part`
file keeps a hole there; reading it back for the final check does not touch the disk
either, as long as it is still a hole.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable
from typing import Any

from agent.transfer import wire
from agent.transfer.compress import decompress
from agent.transfer.errors import TransferError
from agent.transfer.schedule import CHUNK
from agent.transfer.zeros import ZEROS, zero_crc

CRC_MAX = 0xFFFFFFFF


def crc_of(pieces: Iterable[bytes | memoryview]) -> int:
    """The CRC-32 of `pieces` joined, without joining them."""
    crc = 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
    return crc


def chunk_data(
    meta: dict[str, Any], payload: bytes | None, length: int, crc: int, *, verify: bool
) -> bytes | None:
    """The chunk's bytes, or None for an all-zero chunk (nothing to write). With `verify`
    they are checked against `crc` here; without it the caller re-reads the landed file
    against the chunks' CRCs before it takes its name (checking each byte once)."""
    if meta.get("zero") is True:
        if payload is not None or crc != zero_crc(length):
            raise wire.WireError(f"bad zero chunk for {meta.get('p')!r}")
        return None
    payload = payload if payload is not None else b""
    data = decompress(payload, length) if meta.get("z") else bytes(payload)
    if len(data) != length or (verify and zlib.crc32(data) != crc):
        where = f"{meta.get('p')!r}: chunk {meta.get('i')}"
        raise TransferError(f"verification failed for {where} does not match")
    return data


def read_back(fd: int, index: int, size: int, crc: int | None) -> tuple[bytes, bool]:
    """A landed chunk's bytes for the final check, and whether they are known zeros: a
    chunk that should be, and still is, all hole is not read (nor need it be checked)."""
    start = index * CHUNK
    length = min(CHUNK, size - start)
    if crc == zero_crc(length):
        try:
            hole = os.lseek(fd, start, os.SEEK_DATA) >= start + length
        except OSError:  # ENXIO: only hole from `start` on
            hole = True
        if hole:
            return ZEROS[:length], True
    return os.pread(fd, length, start), False
