"""The first pull lands small outputs while the node's listing still arrives
(engine/run/transfer.py `_land_while_listing`): real iroh endpoints on loopback, a node
whose walk is slowed so that its listing takes a while, as 100,000 outputs do."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from agent.transfer import Progress, TransferError, server, walk
from agent.transfer.schedule import LARGE_MIN
from engine.run import transfer
from engine.run.transfer import Stopped, pull_outputs
from tests.integration.transfer_harness import loopback_pair, snapshot

pytestmark = pytest.mark.timeout(60)
FILES = 240


@pytest.fixture
def slow_listing(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[float]]:
    """Pages of 20 entries, each entry 4 ms to walk (the whole listing ~1 s); when the
    node's listings ended and its pulls began (monotonic times)."""
    times: dict[str, list[float]] = {"listed": [], "pulls": []}
    entry = walk._entry

    def slow_entry(root: Path, rel: str, st: os.stat_result) -> walk.Entry:
        time.sleep(0.004)
        return entry(root, rel, st)

    async def listing(*args: Any) -> None:
        await server._list(*args)
        times["listed"].append(time.monotonic())

    async def pull(*args: Any) -> None:
        times["pulls"].append(time.monotonic())
        await server._pull(*args)

    monkeypatch.setattr(walk, "PAGE", 20)
    monkeypatch.setattr(walk, "_entry", slow_entry)
    monkeypatch.setitem(server._HANDLERS, "list", listing)
    monkeypatch.setitem(server._HANDLERS, "pull", pull)
    return times


@pytest.fixture
def node_and_run(tmp_path: Path) -> tuple[Path, Path]:
    """A node's workdir holding the outputs, and the run dir they are pulled into."""
    make_outputs(tmp_path / "node")
    return tmp_path / "node", tmp_path / "run"


def make_outputs(node: Path) -> None:
    for i in range(FILES):
        (node / "out" / f"d{i % 12:02}").mkdir(parents=True, exist_ok=True)
        (node / "out" / f"d{i % 12:02}" / f"f{i}").write_bytes(os.urandom(100 + i))
    (node / "out" / "big.bin").write_bytes(os.urandom(LARGE_MIN + 1))  # waits for its digest


async def stop_a_pull(
    node: Path, run_dir: Path, patterns: list[str], why: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Pull `patterns`, and stop the pull for `why` as soon as a file has landed (its
    progress says so: a stop after a fixed time found nothing landed on a busy machine).
    The writers' work it cut short is not logged as a lost exception."""
    stopped, seen = Stopped(), []
    async with loopback_pair(node) as link:
        pulling = pull_outputs(link, patterns, run_dir, seen.append, stopped=stopped)
        pull = asyncio.create_task(pulling)
        while not any(p.files_done for p in seen):
            assert not pull.done(), "the pull ended before any progress said a file landed"
            await asyncio.sleep(0.01)
        stopped.why = why
        pull.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pull
    await asyncio.sleep(0.3)  # the writers end what they held; then their futures go
    gc.collect()
    assert "never retrieved" not in caplog.text


def landed_and_verified(run_dir: Path) -> tuple[dict[str, Any], set[str], set[str]]:
    """The run's manifest, the files in its outputs/, and those the manifest says landed."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    outputs = run_dir / "outputs"
    landed = {str(p.relative_to(outputs)) for p in outputs.rglob("*") if p.is_file()}
    return manifest, landed, {f["path"] for f in manifest["files"] if f["verified"]}


async def test_small_outputs_land_while_the_listing_arrives_and_the_pull_is_exact(
    node_and_run: tuple[Path, Path],
    slow_listing: dict[str, list[float]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """…and the listing's pages come zstd-packed (6.9 MB of JSON for 100,000 outputs)."""
    node, run_dir = node_and_run
    unpacked = 0
    rows_of = transfer._packed_rows

    async def counted(reader: Any) -> Any:
        nonlocal unpacked
        unpacked += 1
        return await rows_of(reader)

    monkeypatch.setattr(transfer, "_packed_rows", counted)
    seen: list[Progress] = []
    async with loopback_pair(node) as link:
        pulled = await pull_outputs(link, ["out"], run_dir, seen.append)
    [listed] = slow_listing["listed"]
    entries = FILES + 12 + 2  # the small files, their 12 dirs, out/ and big.bin
    assert unpacked == -(-entries // 20)  # every page of 20 came packed
    totals = [p.bytes_total for p in seen]  # grows as pages come, never falls back
    assert totals == sorted(totals) and seen[-1].done
    assert seen[-1].bytes_done == seen[-1].bytes_total == pulled.bytes
    assert min(slow_listing["pulls"]) < listed, "nothing was pulled before the listing ended"
    assert snapshot(run_dir / "outputs" / "out") == snapshot(node / "out")
    assert pulled.attempts == 1 and len(pulled.files) == FILES + 1
    assert all(f.verified for f in pulled.files)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is True and len(manifest["files"]) == FILES + 1


async def test_a_pull_stopped_while_listing_names_what_landed_and_only_that(
    node_and_run: tuple[Path, Path],
    slow_listing: dict[str, list[float]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Stopped before the listing ended: every file in outputs/ is in the manifest as
    verified, every other file listed so far has the stop's reason, and the patterns
    are named, as for a pull stopped before any listing."""
    node, run_dir = node_and_run
    why = "stopped by operator"
    await stop_a_pull(node, run_dir, ["out"], why, caplog)
    assert not slow_listing["listed"], "the listing ended before the stop: nothing tested"
    manifest, landed, verified = landed_and_verified(run_dir)
    assert manifest["complete"] is False and manifest["cut_short"] == why
    assert verified and landed == verified
    assert all(f["reason"] == why for f in manifest["files"] if not f["verified"])
    assert manifest["missing"] == ["out"]


async def test_a_connection_cut_while_listing_resumes_and_the_pull_is_exact(
    node_and_run: tuple[Path, Path], slow_listing: dict[str, list[float]]
) -> None:
    node, run_dir = node_and_run
    async with loopback_pair(node) as link:
        pull = asyncio.create_task(pull_outputs(link, ["out"], run_dir, lambda p: None))
        while not slow_listing["pulls"]:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        link.cut()
        pulled = await pull
    assert slow_listing["listed"], "the retry never listed"
    assert min(slow_listing["pulls"]) < min(slow_listing["listed"])
    assert pulled.attempts >= 2 and all(f.verified for f in pulled.files)
    assert snapshot(run_dir / "outputs" / "out") == snapshot(node / "out")
    assert sorted(os.listdir(run_dir / "outputs")) == ["out"]  # no stage left behind


async def test_a_pull_stopped_after_the_listing_names_the_nodes_own_missing_list(
    node_and_run: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The listing done but small files still landing: the manifest holds the node's
    whole listing (its missing list, not the patterns), and only landed files as verified."""
    node, run_dir = node_and_run

    async def slow_pull(*args: Any) -> None:
        await asyncio.sleep(0.3)
        await server._pull(*args)

    monkeypatch.setattr(walk, "PAGE", 20)
    monkeypatch.setitem(server._HANDLERS, "pull", slow_pull)
    # the first file lands 0.3 s late, long after the listing (0 ms a page) ended
    await stop_a_pull(node, run_dir, ["out", "gone"], "cap reached", caplog)
    manifest, landed, verified = landed_and_verified(run_dir)
    assert manifest["missing"] == ["gone"] and len(manifest["files"]) == FILES + 1
    assert verified and landed == verified and len(verified) < FILES + 1


async def test_a_walk_failing_midway_reaches_the_operator_as_the_nodes_error(
    node_and_run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages already sent, then the node's walk fails: the operator gets the node's own
    error (the pages before it whole), not a garbled stream retried to its end."""
    node, run_dir = node_and_run
    entry, made = walk._entry, [0]

    def failing_entry(root: Path, rel: str, st: os.stat_result) -> walk.Entry:
        made[0] += 1
        if made[0] == 70:
            raise PermissionError(13, "Permission denied", rel)
        return entry(root, rel, st)

    monkeypatch.setattr(walk, "PAGE", 20)
    monkeypatch.setattr(walk, "_entry", failing_entry)
    async with loopback_pair(node) as link:
        with pytest.raises(TransferError, match="node-side transfer error: PermissionError"):
            await pull_outputs(link, ["out"], run_dir, lambda p: None)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is False and manifest["missing"] == ["out"]


async def test_an_output_listed_twice_is_refused(
    node_and_run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node listing one path twice (only a hostile one does) would have two workers land
    it at once, and the manifest's hash might describe the copy that lost."""
    node, run_dir = node_and_run
    entry = walk._entry

    def doubling_entry(root: Path, rel: str, st: os.stat_result) -> walk.Entry:
        return entry(root, "out/d00/f0" if rel == "out/d00/f120" else rel, st)

    monkeypatch.setattr(walk, "PAGE", 20)
    monkeypatch.setattr(walk, "_entry", doubling_entry)
    async with loopback_pair(node) as link:
        with pytest.raises(TransferError, match="'out/d00/f0' listed twice"):
            await pull_outputs(link, ["out"], run_dir, lambda p: None)
