"""zstd where it pays, raw bytes where it does not.

A slow link gains a lot from compressing source trees (a site-packages tree shrinks
to about a third), while a fast link should not pay CPU for data that does not
shrink. Each payload (a batch of small files, or one chunk of a large file) is
judged by its name's extension when known, else by compressing a small sample at
the fastest level; only if the sample shrinks is the whole payload compressed. The
sample is `PROBES` pieces from across the payload, not its first 128 KiB: a batch
opening with one incompressible file (a wheel, a `.gz`) was sent raw whole, and on a
site-packages tree two such 4 MiB batches (one mostly `.py`, 0.31 of it at level 9)
cost 3.0 MB of 146 on the wire (2.1 %). Grouping a push's files by kind, one zstd stream
a transfer stream and a trained dictionary were measured too (docs/benchmarks.md, "Slow
links, third round"): none wins more than 2 % of bytes at a CPU and memory that fit.

At what level is measured, not guessed (`Pace`): a stream whose link takes longer to
write a packet than the stream waited for it to be packed has CPU to spare, so its next
packet is packed harder, up to `MAX_LEVEL`; one that waits on its packer packs faster,
down to level 1. A link-bound push (a slow link) so spends its idle CPU on ratio. The
wait counts from asking a packer for the packet to having it, queueing for a free
packer included: the streams share min(streams, cores) packers, and on a loaded machine
(or on loopback, where the node's agent runs on the same cores) the CPU a packer gets
is what limits it. Timed inside the packer only (as before), each of four streams could
see its own packet built faster than the link took it and climb, while together they
asked more of the packers than the cores had. A stream's first `FILL` bytes are written at
once whatever the link (they fill the connection's send buffers), so they are no sign of
a fast link: over a 100 Mbit link the pace took every stream down to level 1 in that
first burst and spent the next packets climbing back, leaving a third of them at levels
1-3 (tree c: 86.7 MB on the wire against 82.6 MB at level 6 throughout).

On a site-packages tree (507 MB: 210 MB of `.so`, 110 MB `.pyc`, 89 MB `.py`), one core
of this machine at load ~3, the schedule's 4 MiB batches keep (MB, CPU s for the tree):
level 1 174.8, 1.3 s; 3 155.1, 1.9 s; 6 144.3, 6.3 s; 7 142.8, 7.6 s; 9 140.9, 10.5 s;
12 139.8, 23.6 s; zlib -6 (rsync -z) keeps 167.5 MB of the same tree as one tar.
Compressing each stream as one zstd stream across its batches gains nothing at the same
window (156.0 at level 3, 144.6 at 6: a batch is twice level 6's 2 MiB window); a 16 MiB
window with long-distance matching gains 1-4 % (152.2 at 3, 142.2 at 6, 138.5 at 9) for
16 MiB of window a stream on each side (64 MB for four streams): not used. Level 9's
context holds 14 MB against level 6's 5 MB, so ~9 MB more a packer (min(4, cores) of
them: ~18 MB on two cores, ~36 MB on four or more);
beyond 9 the CPU doubles for under 1 % fewer bytes, so the pace stops at 9.
`SWJOB_XFER_ZSTD_LEVEL` pins the level.
"""

from __future__ import annotations

import os
import threading

import zstandard

from agent.transfer.errors import WireError

LEVEL_ENV = "SWJOB_XFER_ZSTD_LEVEL"
DEFAULT_LEVEL = 3
MAX_LEVEL = 9  # level 12 keeps under 1 % fewer bytes than 9 at twice the CPU
SAMPLE = 128 * 1024
PROBES = 4  # the sample's pieces, spread evenly over the payload
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
    """The zstd level of one stream's next packet, from how long the stream waits for its
    packets to be packed and how long they take to write: writing (the link) slower than
    packing means CPU to spare, so the next packet is packed harder; packing slower than
    writing, faster. Packing time is wall time with the wait for a free packer, so CPU
    taken by other streams, the other side or other processes counts against it."""

    SLACK = 1.5  # the link must be this much slower than packing before the level rises
    # Bytes a stream writes before its writes say anything about the link: measured over
    # a 100 Mbit link, a stream's writes returned at once until it had sent 1.7-3 MB.
    FILL = 2 * 1024 * 1024

    def __init__(self) -> None:
        pinned = pinned_level()
        self.level = DEFAULT_LEVEL if pinned is None else pinned
        self._pinned = pinned is not None

    def observe(self, pack_s: float, write_s: float, sent: int) -> None:
        """One compressed packet took `pack_s` to get built and `write_s` to go out, its stream
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
        sample = _sample(parts, total)
        if len(_compressor(1, "probe").compress(sample)) > SAMPLE_RATIO * len(sample):
            return parts, False
    packed = _compressor(level).compress(parts[0] if len(parts) == 1 else b"".join(parts))
    if len(packed) > KEEP_RATIO * total:
        return parts, False
    return [packed], True


def _sample(parts: list[bytes], total: int) -> bytes:
    """`SAMPLE` bytes in `PROBES` pieces from evenly spread offsets of the payload held in
    `parts` (a piece stops early at the end of its part: nothing large is joined)."""
    piece, pieces, base, at = SAMPLE // PROBES, [], 0, 0
    for k in range(PROBES):
        offset = k * total // PROBES
        while base + len(parts[at]) <= offset:
            base += len(parts[at])
            at += 1
        pieces.append(parts[at][offset - base : offset - base + piece])
    return b"".join(pieces)


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
