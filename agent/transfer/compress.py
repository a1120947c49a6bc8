"""zstd where it pays, raw bytes where it does not.

A slow link gains a lot from compressing source trees (a site-packages tree shrinks
to about a third), while a fast link should not pay CPU for data that does not
shrink. Each payload (a batch of small files, or one chunk of a large file) is
judged by its name's extension when known, else by compressing a small sample at
the fastest level; only if the sample shrinks is the whole payload compressed.
"""

from __future__ import annotations

import os
import threading

import zstandard

from agent.transfer.errors import WireError

LEVEL_ENV = "SWJOB_XFER_ZSTD_LEVEL"
DEFAULT_LEVEL = 3
SAMPLE = 128 * 1024
SAMPLE_RATIO = 0.9  # the sample must shrink at least this much to try the whole payload
KEEP_RATIO = 0.97  # a compressed payload not smaller than this fraction is sent raw

_EXTENSIONS = (
    "gz tgz bz2 xz zst zstd lz4 zip whl 7z rar jar npz pt pth ckpt safetensors "
    "jpg jpeg png gif webp mp4 mkv mov mp3 ogg flac parquet pdf docx xlsx"
)
INCOMPRESSIBLE = frozenset("." + ext for ext in _EXTENSIONS.split())

_local = threading.local()


def level() -> int:
    try:
        return int(os.environ.get(LEVEL_ENV, DEFAULT_LEVEL))
    except ValueError:
        return DEFAULT_LEVEL


def _compressor(lvl: int) -> zstandard.ZstdCompressor:
    """One compressor per thread and level: zstd contexts are reused, never shared."""
    key = f"c{lvl}"
    comp = getattr(_local, key, None)
    if comp is None:
        comp = zstandard.ZstdCompressor(level=lvl)
        setattr(_local, key, comp)
    return comp


def _decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_local, "d", None)
    if dec is None:
        dec = _local.d = zstandard.ZstdDecompressor()
    return dec


def known_incompressible(path: str) -> bool:
    dot = path.rfind(".")
    return dot > path.rfind("/") and path[dot:].lower() in INCOMPRESSIBLE


def maybe_compress(data: bytes, path_hint: str | None = None) -> tuple[bytes, bool]:
    """(payload, compressed?) — compressed only when a sample says it shrinks and it did."""
    parts, packed = maybe_compress_parts([data], path_hint)
    return parts[0], packed


def maybe_compress_parts(
    parts: list[bytes], path_hint: str | None = None
) -> tuple[list[bytes], bool]:
    """`maybe_compress` for bytes held in pieces: random data is judged by a sample of
    its first piece and goes on in its pieces, never joined (copied) just to be judged."""
    total = sum(map(len, parts))
    if total < 512 or (path_hint is not None and known_incompressible(path_hint)):
        return parts, False
    if total > 2 * SAMPLE:
        sample = parts[0][:SAMPLE]
        if len(_compressor(1).compress(sample)) > SAMPLE_RATIO * len(sample):
            return parts, False
    packed = _compressor(level()).compress(parts[0] if len(parts) == 1 else b"".join(parts))
    if len(packed) > KEEP_RATIO * total:
        return parts, False
    return [packed], True


def decompress(payload: bytes | memoryview, limit: int) -> bytes:
    """Decompress one payload; refuse output beyond `limit` bytes (a hostile frame)."""
    try:
        if zstandard.frame_content_size(payload) > limit:
            raise WireError(f"compressed frame expands beyond {limit} bytes")
        out = _decompressor().decompress(payload, max_output_size=limit)
    except zstandard.ZstdError as exc:
        raise WireError(f"bad compressed frame: {exc}") from None
    if len(out) > limit:
        raise WireError(f"compressed frame expands beyond {limit} bytes")
    return out
