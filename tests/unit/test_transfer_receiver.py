"""The receiver lands a batch of small files with several writers, verified, byte-exact."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from agent.transfer import TransferError, wire
from agent.transfer.receiver import WRITERS, Receiver


class _Stream:
    """A readable stream over bytes that are all there already (a fast link)."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def read(self, size_limit: int) -> bytes:
        piece, self._data = self._data[:size_limit], self._data[size_limit:]
        return piece

    async def read_exact(self, size: int) -> bytes:
        return await self.read(size)


def _file(path: str, data: bytes, mode: int = 0o644, digest: str | None = None) -> bytes:
    meta = {"t": "file", "p": path, "m": mode, "mt": 1_000_000_000_000_000_000, "s": len(data)}
    return wire.record(meta | {"h": digest or hashlib.sha256(data).hexdigest()}, data)


async def _receive(root: Path, records: bytes) -> Receiver:
    body = wire.frame(wire.BATCH, records) + wire.record({"t": "end"})
    receiver = Receiver(root)
    landed: list[int] = []
    await receiver.receive(wire.FrameReader(_Stream(body)), lambda n, f, c: landed.append(f))
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
