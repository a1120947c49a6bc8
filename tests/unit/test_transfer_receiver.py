"""The receiver lands a batch of small files with several writers, verified, byte-exact."""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path

import pytest

from agent.transfer import TransferError, wire
from agent.transfer.landing import Lander
from agent.transfer.receiver import WRITERS, Receiver
from agent.transfer.schedule import CHUNK
from agent.transfer.sender import CHANGED, build_packet
from tests.support.bytestream import BytesStream


def _file(path: str, data: bytes, mode: int = 0o644, digest: str | None = None) -> bytes:
    meta = {"t": "file", "p": path, "m": mode, "mt": 1_000_000_000_000_000_000, "s": len(data)}
    return wire.record(meta | {"h": digest or hashlib.sha256(data).hexdigest()}, data)


async def _receive(root: Path, records: bytes) -> Receiver:
    body = wire.frame(wire.BATCH, records) + wire.record({"t": "end"})
    receiver = Receiver(root)
    landed: list[int] = []
    await receiver.receive(wire.FrameReader(BytesStream(body)), lambda n, f, c: landed.append(f))
    receiver.close()
    return receiver


async def test_a_batch_spread_over_the_writers_lands_every_file_exactly(tmp_path: Path) -> None:
    files = {f"d{i % 7}/f{i}": os.urandom(i * 13 % 5000) for i in range(40 * WRITERS)}
    records = wire.record({"t": "dir", "p": "d0", "m": 0o755})
    records += b"".join(
        _file(p, data, 0o600 if i % 2 else 0o755) for i, (p, data) in enumerate(files.items())
    )
    receiver = await _receive(tmp_path, records)
    assert set(receiver.verified) == set(files)
    for i, (path, data) in enumerate(files.items()):
        assert (tmp_path / path).read_bytes() == data
        assert (tmp_path / path).stat().st_mode & 0o777 == (0o600 if i % 2 else 0o755)
    assert not [p for p in tmp_path.rglob(".*swjob-*")]


async def test_a_path_named_twice_in_a_batch_lands_its_last_version(tmp_path: Path) -> None:
    """One writer applies such a batch in order: no two writers race on one temp file."""
    records = b"".join(_file(f"f{i}", b"x" * i) for i in range(8 * WRITERS))
    records += _file("f1", b"second version")
    receiver = await _receive(tmp_path, records)
    assert (tmp_path / "f1").read_bytes() == b"second version"
    assert receiver.verified["f1"].size == len(b"second version")


async def test_a_bad_file_in_one_writers_slice_fails_naming_it(tmp_path: Path) -> None:
    records = b"".join(_file(f"f{i}", b"ok %d" % i) for i in range(8 * WRITERS - 1))
    records += _file("bad", b"payload", digest="0" * 64)
    with pytest.raises(TransferError, match="verification failed for 'bad'"):
        await _receive(tmp_path, records)
    assert not (tmp_path / "bad").exists()


def _chunk(path: str, size: int, index: int, data: bytes, version: str) -> bytes:
    meta = {"t": "chunk", "p": path, "m": 0o644, "mt": 1, "s": size, "i": index}
    meta |= {"n": len(data), "z": False, "v": version, "c": zlib.crc32(data)}
    return wire.record(meta, data)


async def _receive_stream(receiver: Receiver, records: bytes) -> None:
    body = records + wire.record({"t": "end"})
    await receiver.receive(wire.FrameReader(BytesStream(body)), lambda n, f, c: None)


@pytest.mark.parametrize("per_file", [False, True], ids=["node", "operator"])
async def test_chunks_of_two_versions_of_a_file_never_land_together(
    tmp_path: Path, per_file: bool
) -> None:
    size = 2 * CHUNK
    receiver = Receiver(tmp_path, per_file=per_file)
    await _receive_stream(
        receiver,
        _chunk("f", size, 0, b"a" * CHUNK, "v1") + _chunk("f", size, 1, b"b" * CHUNK, "v2"),
    )
    receiver.close()
    assert receiver.failed == {"f": CHANGED} and "f" not in receiver.verified
    assert list(tmp_path.iterdir()) == []  # neither the file nor its .part


async def test_on_the_operator_side_one_bad_file_is_recorded_and_the_rest_lands(
    tmp_path: Path,
) -> None:
    records = _file("bad", b"payload", digest="0" * 64) + _file("good", b"good")
    records += wire.record({"t": "skip", "p": "gone", "why": "vanished before it could be read"})
    receiver = Receiver(tmp_path, per_file=True)
    await _receive_stream(receiver, wire.frame(wire.BATCH, records))
    receiver.close()
    assert receiver.failed == {
        "bad": "verification failed for 'bad': content does not match",
        "gone": "vanished before it could be read",
    }
    assert (tmp_path / "good").read_bytes() == b"good"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good"]


async def test_an_all_zero_chunk_is_a_hole_on_both_ends(tmp_path: Path) -> None:
    """The sender sends a hole as its hash alone; the receiver leaves it unwritten."""
    src = tmp_path / "src.bin"
    with src.open("wb") as f:
        f.truncate(3 * CHUNK)
        f.seek(CHUNK)
        f.write(os.urandom(CHUNK))
    items = [["chunk", "src.bin", i] for i in range(3)]
    packets = [build_packet(tmp_path, items, i)[0] for i in range(3)]
    assert [len(b"".join(p.parts)) < 1024 for p in packets] == [True, False, True]
    out = tmp_path / "out"
    out.mkdir()
    receiver = Receiver(out, hash_chunked=True)
    await _receive_stream(receiver, b"".join(b"".join(p.parts) for p in packets))
    receiver.close()
    landed = out / "src.bin"
    assert landed.read_bytes() == src.read_bytes()
    assert landed.stat().st_blocks * 512 <= CHUNK + 64 * 1024  # only the data chunk allocated
    assert receiver.verified["src.bin"].sha256 == hashlib.sha256(src.read_bytes()).hexdigest()


async def test_a_receiver_that_fails_never_leaves_the_stream_reader_waiting(
    tmp_path: Path,
) -> None:
    """The applier dies on the first record (its root is gone) while more records queue up:
    the error comes out instead of the reader waiting forever on a full queue."""
    records = b"".join(_chunk("f", 9 * CHUNK, i, b"z" * 10, "v") for i in range(6))
    with pytest.raises(TransferError, match="cannot write 'f'"):
        await _receive_stream(Receiver(tmp_path / "absent"), records)


def test_in_place_landing_never_writes_through_a_name_already_taken(tmp_path: Path) -> None:
    """A push lands small files straight under their names; a name already there (here a
    hard link to a file the node holds) is replaced by rename, its other link untouched."""
    held = tmp_path / "held"
    held.write_bytes(b"the previous run's")
    root = tmp_path / "work"
    (root / "d").mkdir(parents=True)
    os.link(held, root / "d" / "taken")
    lander = Lander(root, in_place=True)
    lander.write_file("d/new", b"new", 0o640, 1_000_000_000)
    lander.write_file("d/taken", memoryview(b"pushed"), 0o755, 1_000_000_000)
    assert (root / "d" / "new").read_bytes() == b"new"
    assert (root / "d" / "taken").read_bytes() == b"pushed"
    assert held.read_bytes() == b"the previous run's"
    assert oct((root / "d" / "new").stat().st_mode & 0o777) == oct(0o640)
    assert oct((root / "d" / "taken").stat().st_mode & 0o777) == oct(0o755)
    assert (root / "d" / "new").stat().st_mtime_ns == 1_000_000_000
    assert not list(root.rglob(".*swjob-*"))
