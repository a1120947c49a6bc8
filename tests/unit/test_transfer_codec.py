"""Framing, compression decisions and progress throttling of the transfer codec."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from agent.livewire import Reader, ShellOpen, encode_msg, read_msg
from agent.transfer import Progress, wire
from agent.transfer.compress import (
    DEFAULT_LEVEL,
    LEVEL_ENV,
    MAX_LEVEL,
    Pace,
    decompress,
    maybe_compress,
    maybe_compress_parts,
)
from agent.transfer.progress import ProgressMeter
from agent.transfer.schedule import BATCH_TARGET, CHUNK, LARGE_MIN, schedule
from agent.transfer.sender import FIRST_BATCH, packers, send_items
from agent.transfer.walk import Entry


class _Bytes:
    """A readable stream over fixed bytes, handing them out in small pieces."""

    def __init__(self, data: bytes, piece: int = 7) -> None:
        self._data = data
        self._piece = piece
        self.exact_reads = 0

    async def read(self, size_limit: int) -> bytes:
        size = min(self._piece, size_limit)
        piece, self._data = self._data[:size], self._data[size:]
        return piece

    async def read_exact(self, size: int) -> bytes:
        self.exact_reads += 1
        if len(self._data) < size:
            raise EOFError("short")
        piece, self._data = self._data[:size], self._data[size:]
        return piece


async def test_frames_round_trip_across_small_reads() -> None:
    big = os.urandom(200_000)
    stream = wire.record({"t": "file", "p": "a"}, b"abc") + wire.record({"t": "x"}, big)
    reader = wire.FrameReader(_Bytes(stream), pace_s=0)
    assert await reader.next_meta() == {"t": "file", "p": "a"}
    assert await reader.next_frame() == (wire.DATA, b"abc")
    assert await reader.next_meta() == {"t": "x"}
    assert await reader.next_frame() == (wire.DATA, big)
    assert await reader.next_frame() is None


async def test_a_live_request_hands_what_was_read_past_it_to_the_live_reader() -> None:
    """A live stream on the transfer connection: its request and the shell's first frame
    arrive in one read; the transfer reader's leftover starts the live service's reader."""
    shell = encode_msg(ShellOpen())
    stream = _Bytes(wire.record({"t": "req", "op": "live"}) + shell + b"typed", piece=1 << 16)
    reader = wire.FrameReader(stream, pace_s=0)
    assert await reader.next_meta() == {"t": "req", "op": "live"}
    live = Reader(stream, reader.leftover())
    assert isinstance(await read_msg(live), ShellOpen)
    assert await live.some() == b"typed"
    assert reader.leftover() == b""


async def test_large_body_on_a_fast_link_takes_the_rest_in_one_read_exact() -> None:
    """A first piece of FAST bytes means a fast link: no pacing, the rest in one call."""
    big = os.urandom(3 * wire.FAST)
    stream = _Bytes(wire.frame(wire.DATA, big) + wire.frame(wire.DATA, b"tail"), wire.FAST)
    reader = wire.FrameReader(stream, pace_s=60.0)  # a sleep would time the test out
    assert await reader.next_frame() == (wire.DATA, big)
    assert await reader.next_frame() == (wire.DATA, b"tail")
    assert await reader.next_frame() is None
    assert stream.exact_reads == 1


class _Trickle:
    """A stream whose bytes arrive at a fixed rate (loop time), like a slow link."""

    def __init__(self, data: bytes, bytes_per_s: float) -> None:
        self._data, self._rate, self._pos = data, bytes_per_s, 0
        self._start = asyncio.get_running_loop().time()
        self.reads = 0

    def _arrived(self) -> int:
        elapsed = asyncio.get_running_loop().time() - self._start
        return min(len(self._data), int(elapsed * self._rate))

    async def read(self, size_limit: int) -> bytes:
        self.reads += 1
        while self._arrived() <= self._pos:  # a real read waits for the next packet
            await asyncio.sleep(0.0002)
        end = min(self._arrived(), self._pos + size_limit)
        piece, self._pos = self._data[self._pos : end], end
        return piece

    async def read_exact(self, size: int) -> bytes:
        raise AssertionError("a trickling body must not be read per packet")


async def test_large_body_on_a_slow_link_is_read_in_paced_pieces() -> None:
    """At ~20 MB/s a 1 MB body arrives over ~50 ms: a handful of reads, not one per packet."""
    big = os.urandom(1_000_000)
    stream = _Trickle(wire.frame(wire.DATA, big), 20e6)
    reader = wire.FrameReader(stream)
    assert await reader.next_frame() == (wire.DATA, big)
    assert stream.reads <= 1 + 50 / (wire.PACE_S * 1000) + 5


async def test_truncated_stream_is_a_dropped_connection() -> None:
    reader = wire.FrameReader(_Bytes(wire.record({"t": "x"}, b"0123456789")[:-3]))
    await reader.next_meta()
    with pytest.raises(wire.StreamEnded):
        await reader.next_frame()


def test_compression_only_when_it_pays() -> None:
    text = b"import numpy as np\n" * 50_000
    packed, compressed = maybe_compress(text)
    assert compressed and len(packed) < len(text) / 10
    assert decompress(packed, len(text)) == text
    noise = os.urandom(1 << 20)
    assert maybe_compress(noise) == (noise, False)
    assert maybe_compress(text, "weights.safetensors") == (text, False)


def test_a_payload_is_judged_by_samples_from_across_it() -> None:
    """A batch opening with an incompressible file (a wheel) is still compressed when the
    rest of it shrinks, held whole or in pieces; noise in pieces still goes raw."""
    noise, text = os.urandom(256 * 1024), b"def f(x):\n    return x + 1\n" * 40_000
    packed, compressed = maybe_compress(noise + text)
    assert compressed and decompress(packed, len(noise + text)) == noise + text
    parts, compressed = maybe_compress_parts([noise, b"", text[:500_000], text[500_000:]])
    assert compressed and len(parts) == 1 and len(parts[0]) < len(noise) + len(text) / 10
    pieces = [os.urandom(1 << 20) for _ in range(3)]
    assert maybe_compress_parts(pieces) == (pieces, False)


def test_decompress_refuses_output_beyond_limit() -> None:
    packed, _ = maybe_compress(b"a" * 100_000)
    with pytest.raises(wire.WireError):
        decompress(packed, 1000)


def test_schedule_spreads_chunks_and_skips_verified() -> None:
    big = Entry("big", "file", LARGE_MIN + 3 * CHUNK)
    small = Entry("s", "file", 10)
    plan = schedule([Entry("d", "dir"), small, big], {"s"}, {"big": {0}}, streams=4)
    assert plan.streams[0][0] == ["dir", "d"]
    chunks = [i for s in plan.streams for i in s if i[0] == "chunk"]
    assert len(chunks) == big.size // CHUNK + 1 - 1 - (big.size % CHUNK == 0)
    assert all(len(s) > 0 for s in plan.streams[1:])
    assert plan.files_skipped == 1 and plan.bytes_skipped == 10 + CHUNK


def test_schedule_deals_runs_of_small_files_over_all_streams_in_walk_order() -> None:
    """Ten 1 MiB files make runs of BATCH_TARGET bytes, one per stream in turn, so a tree
    of small files is packed and landed by every stream's worker, not by stream 0's alone."""
    per_run = BATCH_TARGET // (1 << 20)
    files = [Entry(f"f{i:02}", "file", 1 << 20) for i in range(10)]
    plan = schedule([Entry("d", "dir"), *files], streams=4)
    runs = [[item[1] for item in stream] for stream in plan.streams]
    names = ["d", *(e.path for e in files)]
    assert runs[0] == names[: per_run + 1]  # the dir has no bytes: it rides in the first run
    assert runs[1] == names[per_run + 1 : 2 * per_run + 1]
    assert runs[2] == names[2 * per_run + 1 :] and runs[3] == []


def test_progress_is_throttled_and_ends_with_done() -> None:
    seen: list[Progress] = []
    now = [0.0]
    meter = ProgressMeter(seen.append, 1000, 10, clock=lambda: now[0])
    for i in range(100):
        now[0] = i * 0.01  # 100 updates over one second
        meter.add(10, 0, f"f{i}")
    meter.finish()
    assert 9 <= len(seen) <= 12
    assert seen[-1].done and seen[-1].bytes_done == 1000 and seen[-1].eta_s == 0.0
    assert seen[-2].rate_bps == pytest.approx(1000, rel=0.2)


def test_pace_packs_harder_while_the_link_is_slower_and_faster_while_packing_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(LEVEL_ENV, raising=False)
    pace, sent = Pace(), Pace.FILL
    assert pace.level == DEFAULT_LEVEL
    levels = []
    for _ in range(MAX_LEVEL + 2):  # a slow link: each packet waits on the wire
        pace.observe(pack_s=0.1, write_s=0.3, sent=sent)
        levels.append(pace.level)
    assert levels == sorted(levels) and levels[-1] == MAX_LEVEL
    pace.observe(pack_s=0.1, write_s=0.12, sent=sent)  # within the slack: stays
    assert pace.level == MAX_LEVEL
    for _ in range(MAX_LEVEL + 2):  # a fast link: the packer is the slow side
        sent += 1
        pace.observe(pack_s=0.3, write_s=0.1, sent=sent)
    assert pace.level == 1


def test_quick_writes_while_the_buffers_fill_do_not_lower_the_level(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream's first megabytes are taken by buffers whatever the link: over a slow
    link, reading them as a fast one took the level to 1 before the link was seen."""
    monkeypatch.delenv(LEVEL_ENV, raising=False)
    pace = Pace()
    for sent in range(Pace.FILL // 8, Pace.FILL + 1, Pace.FILL // 8):
        pace.observe(pack_s=0.05, write_s=0.001, sent=sent)
    assert pace.level == DEFAULT_LEVEL
    pace.observe(pack_s=0.05, write_s=0.4, sent=Pace.FILL + 1)  # the link shows: harder
    assert pace.level == DEFAULT_LEVEL + 1
    pace.observe(pack_s=0.05, write_s=0.001, sent=Pace.FILL + 2)  # past the fill: counts
    assert pace.level == DEFAULT_LEVEL


def test_a_pinned_level_is_kept_whatever_the_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEVEL_ENV, "7")
    pace = Pace()
    pace.observe(pack_s=0.3, write_s=0.1, sent=Pace.FILL + 1)
    pace.observe(pack_s=0.1, write_s=0.3, sent=Pace.FILL + 2)
    assert pace.level == 7


async def test_a_stream_starts_with_small_batches_so_the_link_is_busy_sooner(
    tmp_path: Path,
) -> None:
    """Nothing leaves before the first batch is packed: a stream's batches start at
    FIRST_BATCH file bytes and double up to BATCH_TARGET, and every file still goes."""
    for i in range(160):
        (tmp_path / f"f{i:03}").write_bytes(os.urandom(64 * 1024))
    items = [["file", f"f{i:03}"] for i in range(160)]
    sizes: list[int] = []

    async def write(buf: bytes) -> None:
        pass

    await send_items(tmp_path, items, write, lambda packet: sizes.append(packet.nbytes))
    assert sizes[:5] == [
        FIRST_BATCH,
        2 * FIRST_BATCH,
        4 * FIRST_BATCH,
        8 * FIRST_BATCH,
        BATCH_TARGET,
    ]
    assert sum(sizes) == 160 * 64 * 1024


async def test_a_packet_s_packing_time_counts_its_wait_for_a_busy_packer(
    tmp_path: Path,
) -> None:
    """The streams share the packers: a packet that waited for one was slow to come,
    whatever the packer then took, and the pace must see it so (not climb on it)."""
    (tmp_path / "f").write_bytes(b"x" * 4096)
    release, held = threading.Event(), 0.3
    busy = [packers().submit(release.wait) for _ in range(packers()._max_workers)]
    got: list[float] = []

    async def write(buf: bytes) -> None:
        pass

    sending = asyncio.create_task(
        send_items(tmp_path, [["file", "f"]], write, lambda packet: got.append(packet.pack_s))
    )
    while packers()._work_queue.empty():  # the packet has asked for a packer: all busy
        await asyncio.sleep(0.001)
    await asyncio.sleep(held)  # what is measured: it waits this long for one
    assert not any(f.done() for f in busy)  # every packer was busy all along
    release.set()
    await sending
    assert got[0] >= held


def test_a_file_frame_round_trips_any_name_and_views_its_bytes_without_a_copy() -> None:
    name = "d/\udcff-näme"  # a non-UTF-8 byte from the filesystem, as os.fsdecode gives it
    digest = bytes(range(32))
    body = b"".join(wire.file_frame(name, 0o755, 1_700_000_000_123_456_789, digest, b"xyz"))
    (kind, view), *rest = list(wire.split_frames(body))
    assert kind == wire.FILE and not rest
    meta, data = wire.parse_file(view)
    assert meta == wire.FileMeta(name, 0o755, 1_700_000_000_123_456_789, digest)
    assert isinstance(data, memoryview) and bytes(data) == b"xyz"


@pytest.mark.parametrize(
    "body",
    [
        b"short",
        wire.FILE_HEAD.pack(0o644, 0, 99, bytes(32)) + b"a",  # the path runs past the frame
        wire.FILE_HEAD.pack(0o17777, 0, 1, bytes(32)) + b"a",  # mode beyond 0o7777
        wire.FILE_HEAD.pack(0o644, -1, 1, bytes(32)) + b"a",  # negative mtime
        wire.FILE_HEAD.pack(0o644, 0, 1, bytes(32)) + b"\xff",  # not UTF-8
    ],
)
def test_a_malformed_file_frame_is_a_wire_error(body: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.parse_file(memoryview(body))
