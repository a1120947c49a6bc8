"""Hostile peers, both ways: crafted frames on real streams must be refused, never obeyed.

Node side: records written straight onto a stream to the real `serve_transfer`.
Operator side: a fake agent answering `pull_outputs` with crafted listings and records.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import Any

import pytest
import zstandard

from agent.transfer import TransferError, wire
from agent.transfer.schedule import CHUNK
from engine.run.transfer import pull_outputs
from tests.integration.transfer_harness import loopback_pair

pytestmark = pytest.mark.timeout(60)


def file_record(path: str, data: bytes, digest: str | None = None) -> bytes:
    meta = {"t": "file", "p": path, "m": 0o644, "mt": 0, "s": len(data)}
    return wire.record(meta | {"h": digest or hashlib.sha256(data).hexdigest()}, data)


async def push_raw(link: Any, body: bytes) -> dict[str, Any]:
    """Send a push request with `body` as its records; the node's answer."""
    bi = await link.open_bi()
    request = wire.record({"t": "req", "op": "push", "session": "hostile"})
    await bi.send().write_all(request + body + wire.record({"t": "end"}))
    await bi.send().finish()
    return await wire.FrameReader(bi.recv()).next_meta()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (file_record("../evil.txt", b"x"), "refused"),
        (file_record("/tmp/abs-evil.txt", b"x"), "refused"),
        (file_record("a/../../evil.txt", b"x"), "refused"),
        (wire.record({"t": "link", "p": "l", "to": "../../evil"}), "refused"),
        (file_record("planted/x.txt", b"x"), "not a real directory"),
        (file_record("ok.txt", b"good", hashlib.sha256(b"bad").hexdigest()), "'ok.txt'"),
    ],
)
async def test_node_refuses_hostile_push_records(tmp_path: Path, body: bytes, expected: str):
    node = tmp_path / "node"
    node.mkdir()
    os.symlink(tmp_path, node / "planted")
    async with loopback_pair(node) as link:
        answer = await push_raw(link, body)
    assert answer["t"] == "err" and expected in answer["msg"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node"]
    assert not (node / "ok.txt").exists()


async def test_node_detects_a_corrupted_chunk(tmp_path: Path) -> None:
    data = os.urandom(CHUNK)
    meta = {"t": "chunk", "p": "big.bin", "m": 0o644, "mt": 0, "s": 3 * CHUNK, "i": 1}
    meta |= {"n": CHUNK, "z": False, "c": zlib.crc32(data)}
    corrupted = data[:100] + bytes([data[100] ^ 1]) + data[101:]
    async with loopback_pair(tmp_path / "node") as link:
        answer = await push_raw(link, wire.record(meta, corrupted))
    assert answer["t"] == "err"
    assert answer["msg"] == "verification failed for 'big.bin': chunk 1 does not match"
    assert not (tmp_path / "node" / "big.bin").exists()


async def test_node_refuses_pulling_outside_its_workdir(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("x")
    async with loopback_pair(tmp_path / "node") as link:
        bi = await link.open_bi()
        request = wire.record({"t": "req", "op": "pull"}) + wire.record(
            {"t": "items", "i": [["file", "../secret"]]}
        )
        await bi.send().write_all(request + wire.record({"t": "end"}))
        await bi.send().finish()
        answer = await wire.FrameReader(bi.recv()).next_meta()
    assert answer["t"] == "err" and "refused" in answer["msg"]


def fake_agent(listing: Any, records: bytes, pages: bytes | None = None):
    """A node that lists `listing` (or sends `pages` as its listing's pages) and answers
    every pull with `records`."""

    async def handler(conn: Any, workdir: Path) -> None:
        while True:
            try:
                bi = await conn.accept_bi()
            except Exception:
                return
            reader = wire.FrameReader(bi.recv())
            req = await reader.next_meta()
            while await reader.next_frame() is not None:
                pass
            if req["op"] == "list":
                body = wire.record({"t": "entries", "e": listing}) if pages is None else pages
                body += wire.record({"t": "end", "missing": [], "refused": []})
            else:
                body = records + wire.record({"t": "end"})
            await bi.send().write_all(body)
            await bi.send().finish()

    return handler


@pytest.mark.parametrize(
    ("listing", "records", "expected"),
    [
        ([["../evil.txt", "file", 1, 420, 0, None]], b"", "refused"),
        ([["l", "link", 0, 511, 0, "../../x"]], b"", "refused"),
        ([["ok.txt", "file", 1, 420, 0, None]], file_record("../evil.txt", b"x"), "refused"),
        ({"ok.txt": 1}, b"", "bad page in an output listing"),
        ([["ok.txt", "file", 1, 420, 0, None]] * 2, b"", "'ok.txt' listed twice"),
    ],
)
async def test_operator_refuses_a_hostile_node(
    tmp_path: Path, listing: Any, records: bytes, expected: str
) -> None:
    run_dir = tmp_path / "run"
    async with loopback_pair(tmp_path / "node", fake_agent(listing, records)) as link:
        with pytest.raises(TransferError, match=expected):
            await pull_outputs(link, ["x"], run_dir, lambda p: None)
    assert not (tmp_path / "evil.txt").exists() and not (run_dir / "outputs" / "ok.txt").exists()


def packed(payload: bytes, data: bool = True) -> bytes:
    page = wire.record({"t": "zentries"})
    return page + (wire.header(wire.DATA, len(payload)) + payload if data else b"")


@pytest.mark.parametrize(
    ("pages", "expected"),
    [
        (packed(b"", data=False), "without its data"),
        (packed(zstandard.ZstdCompressor().compress(b"[" * 10)), "bad packed page"),
        (packed(zstandard.ZstdCompressor().compress(b" " * (wire.MAX_FRAME + 1))), "beyond"),
        (packed(zstandard.ZstdCompressor().compress(b'{"a": 1}')), "bad page"),
        (packed(b"not zstd at all"), "bad compressed frame"),
    ],
)
async def test_operator_refuses_a_hostile_packed_listing(
    tmp_path: Path, pages: bytes, expected: str
) -> None:
    """The listing's pages come zstd-packed when the operator asks (it always does): a
    page must bring its data, expand within MAX_FRAME and hold a list of rows."""
    run_dir = tmp_path / "run"
    async with loopback_pair(tmp_path / "node", fake_agent([], b"", pages)) as link:
        with pytest.raises(TransferError, match=expected):
            await pull_outputs(link, ["x"], run_dir, lambda p: None)


async def test_a_file_that_never_verifies_is_recorded_and_the_rest_lands(tmp_path: Path) -> None:
    """Bad bytes for one file (a node that lies about it every time): one more pass for it,
    then it is recorded with its reason; the good file lands; nothing bad is presented."""
    listing = [["bad.txt", "file", 4, 420, 0, None], ["good.txt", "file", 4, 420, 0, None]]
    records = file_record("bad.txt", b"evil", hashlib.sha256(b"good").hexdigest())
    records += file_record("good.txt", b"good")
    run_dir = tmp_path / "run"
    async with loopback_pair(tmp_path / "node", fake_agent(listing, records)) as link:
        result = await pull_outputs(link, ["x"], run_dir, lambda p: None)
    assert result.attempts == 2  # the first pass, then one more for the failed file
    assert [(e.path, e.reason) for e in result.not_landed] == [
        ("bad.txt", "verification failed for 'bad.txt': content does not match")
    ]
    assert (run_dir / "outputs" / "good.txt").read_bytes() == b"good"
    assert not (run_dir / "outputs" / "bad.txt").exists()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [(e["path"], e["verified"], e["reason"] is not None) for e in manifest["files"]] == [
        ("bad.txt", False, True),
        ("good.txt", True, False),
    ]
