"""zstd where it pays, raw bytes where it does not.

A slow link gains a lot from compressing source trees (a site-packages tree shrinks
to about a third), while a fast link should not pay CPU for data that does not
shrink. Each payload (a batch of small files, or one chunk of a large file) is
judged by its name's extension when known, else by compressing a small sample at
the fastest level; only if the sample shrinks is the whole payload compressed.

At what level is measured, not guessed (`Pace`): a stream whose link takes longer to
write a packet than the packer took to build it has CPU to spare, so its next packet
is packed harder, up to `MAX_LEVEL`; one whose packer is the slower side packs faster,
down to level 1. A link-bound push (a slow link) so spends its idle CPU on ratio. A
stream's first `FILL` bytes are written at once whatever the link (they fill the
connection's send buffers), so they are no sign of a fast link: over a 100 Mbit link
the pace took every stream down to level 1 in that first burst and spent the next
packets climbing back, leaving a third of them at levels 1-3 (tree c: 86.7 MB on the
wire against 82.6 MB at level 6 throughout).
On a site-packages tree (4 MiB batches) level 1 keeps 34 % of the bytes at ~170 MB/s
a core, level 3 30 % at ~78 MB/s, level 6 27 % at ~35 MB/s, level 9 26.5 % at ~24 MB/s.
Long-distance matching gains under 1 % on 4 MiB frames and costs ~15 % speed: not used.
Level 9's contexts raised the operator's peak RSS on that tree from 157 to 189 MB, so
the pace stops at 6.
`SWJOB_XFER_ZSTD_LEVEL` pins the level.
"""

from __future__ import annotations

import os
import threading

import zstandard

from agent.transfer.errors import WireError

LEVEL_ENV = "SWJOB_XFER_ZSTD_LEVEL"
DEFAULT_LEVEL = 3
MAX_LEVEL = 6  # level 9 keeps 1 % fewer bytes, at 2/3 the speed and ~30 MB more RSS
SAMPLE = 128 * 1024
SAMPLE_RATIO = 0.9  # the sample must shrink at least this much to try the whole payload
KEEP_RATIO = 0.97  # a compressed payload not smaller than this fraction is sent raw

_EXTENSIONS = (
    "gz tgz bz2 xz zst zstd lz4 zip whl 7z rar jar npz pt pth ckpt safetensors "
    "jpg jpeg png gif webp mp4 mkv mov mp3 ogg flac parquet pdf docx xlsx"
)
INCOMPRESSIBLE = frozenset("." + ext for ext in _EXTENSIONS.split())

_local = threading.local()


def pinned_level() -> int | None:
    """The level `SWJOB_XFER_ZSTD_LEVEL` pins, or None to let each stream's pace choose."""
    try:
        return int(os.environ[LEVEL_ENV])
    except (KeyError, ValueError):
        return None


class Pace:
    """The zstd level of one stream's next packet, from how long the stream's packets take
    to pack and to write: writing (the link) slower than packing means CPU to spare, so
    the next packet is packed harder; packing slower than writing, faster."""

    SLACK = 1.5  # the link must be this much slower than packing before the level rises
    # Bytes a stream writes before its writes say anything about the link: measured over
    # a 100 Mbit link, a stream's writes returned at once until it had sent 1.7-3 MB.
    FILL = 2 * 1024 * 1024

    def __init__(self) -> None:
        pinned = pinned_level()
        self.level = DEFAULT_LEVEL if pinned is None else pinned
        self._pinned = pinned is not None

    def observe(self, pack_s: float, write_s: float, sent: int) -> None:
        """One compressed packet took `pack_s` to build and `write_s` to go out, its stream
        having written `sent` bytes with it. A quick write while the stream is still
        filling its buffers does not lower the level: the buffer took it, not the link."""
        if self._pinned:
            return
        if write_s > self.SLACK * pack_s:
            self.level = min(self.level + 1, MAX_LEVEL)
        elif pack_s > write_s and sent > self.FILL:
            self.level = max(self.level - 1, 1)


def _compressor(lvl: int, slot: str = "pack") -> zstandard.ZstdCompressor:
    """The thread's compressor in `slot` (the probe's, or the packer's at its latest level):
    zstd contexts are reused, never shared, and one per level (a level-9 context holds
    several MB) would add up across the packing threads."""
    held = getattr(_local, slot, None)
    if held is None or held[0] != lvl:
        held = (lvl, zstandard.ZstdCompressor(level=lvl))
        setattr(_local, slot, held)
    return held[1]


def _decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_local, "d", None)
    if dec is None:
        dec = _local.d = zstandard.ZstdDecompressor()
    return dec


def known_incompressible(path: str) -> bool:
    dot = path.rfind(".")
    return dot > path.rfind("/") and path[dot:].lower() in INCOMPRESSIBLE


def maybe_compress(
    data: bytes, path_hint: str | None = None, level: int = DEFAULT_LEVEL
) -> tuple[bytes, bool]:
    """(payload, compressed?) — compressed only when a sample says it shrinks and it did."""
    parts, packed = maybe_compress_parts([data], path_hint, level)
    return parts[0], packed


def maybe_compress_parts(
    parts: list[bytes], path_hint: str | None = None, level: int = DEFAULT_LEVEL
) -> tuple[list[bytes], bool]:
    """`maybe_compress` for bytes held in pieces: random data is judged by a sample of
    its first piece and goes on in its pieces, never joined (copied) just to be judged."""
    total = sum(map(len, parts))
    if total < 512 or (path_hint is not None and known_incompressible(path_hint)):
        return parts, False
    if total > 2 * SAMPLE:
        sample = parts[0][:SAMPLE]
        if len(_compressor(1, "probe").compress(sample)) > SAMPLE_RATIO * len(sample):
            return parts, False
    packed = _compressor(level).compress(parts[0] if len(parts) == 1 else b"".join(parts))
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
