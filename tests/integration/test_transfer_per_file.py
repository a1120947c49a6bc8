"""One output that cannot move does not sink the others: per-file outcomes over real iroh.

Each test runs the real transfer service (in-process node side) and the real engine-side
pull/push over loopback iroh, with a real fault: a file deleted between listing and
pulling (we run as root, so chmod 000 would not stop a read), a writer process rewriting
a file while it travels, a sparse file, a landing disk too small (a real tmpfs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.transfer.schedule import CHUNK, LARGE_MIN
from agent.transfer.sender import CHANGED
from engine.run import transfer
from engine.run.transfer import pull_outputs, push_workspace
from tests.integration.transfer_harness import loopback_pair
from tests.support.disks import tmpfs
from tests.support.landers import handed_to_landers

pytestmark = pytest.mark.timeout(90)

# Rewrites the file in place forever, each version one byte value at the start of each
# half: between the two writes the file is torn (half new, half old) — what must never
# land as verified. A new version every millisecond or so, not a busy loop, and at a
# real-time priority where it may have one (root, as CI runs): a writer the scheduler
# starves for longer than the sender's settle time pauses mid-rewrite, which no reader
# can tell from a file written that way (the full suite on 2 cores starved the earlier
# writer, which rewrote both 10 MiB halves of each version, about once in 5 runs).
WRITER = """
import os, sys, time
path, size = sys.argv[1], int(sys.argv[2])
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
except (AttributeError, PermissionError):
    pass  # not allowed here: an ordinary process, starved now and then on a busy machine
fd, half, i = os.open(path, os.O_RDWR), size // 2, 0
print("writing", flush=True)
while True:
    i += 1
    block = bytes([i % 251]) * 4096
    os.pwrite(fd, block, 0)
    os.pwrite(fd, block, half)
    time.sleep(0.001)
"""


@pytest.fixture
def rewrite() -> Iterator[Any]:
    """Start a writer rewriting a file until the test ends (killed by its pid)."""
    procs: list[subprocess.Popen[str]] = []

    def start(path: Path, size: int) -> subprocess.Popen[str]:
        path.write_bytes(bytes(size))
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(size)], stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


class DeleteAfterListing:
    """The engine's link, deleting `victim` on the node once the listing stream was opened:
    the file is listed, then gone when its bytes are read."""

    def __init__(self, link: Any, victim: Path) -> None:
        self._link, self._victim, self.streams = link, victim, 0

    async def open_bi(self) -> Any:
        self.streams += 1
        if self.streams == 2:
            self._victim.unlink()
        return await self._link.open_bi()


def manifest_of(run_dir: Path) -> dict[str, tuple[bool, str | None]]:
    body = json.loads((run_dir / "manifest.json").read_text())
    return {e["path"]: (e["verified"], e["reason"]) for e in body["files"]}


async def test_a_vanished_output_is_recorded_and_the_others_land(tmp_path: Path) -> None:
    node, run_dir = tmp_path / "node", tmp_path / "run"
    node.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (node / name).write_text(f"{name}\n")
    (node / "big.bin").write_bytes(os.urandom(LARGE_MIN + CHUNK))
    async with loopback_pair(node) as link:
        hooked = DeleteAfterListing(link, node / "big.bin")
        result = await pull_outputs(hooked, ["*.txt", "big.bin"], run_dir, lambda p: None)
        hooked2 = DeleteAfterListing(link, node / "b.txt")
        result2 = await pull_outputs(hooked2, ["*.txt"], tmp_path / "run2", lambda p: None)
    assert hooked.streams >= 2 and hooked2.streams >= 2  # the deletion happened mid-pull
    gone = "vanished before it could be read"
    assert [(e.path, e.reason) for e in result.not_landed] == [("big.bin", gone)]
    assert [(e.path, e.reason) for e in result2.not_landed] == [("b.txt", gone)]
    landed = {name: (True, None) for name in ("a.txt", "b.txt", "c.txt")}
    assert manifest_of(run_dir) == landed | {"big.bin": (False, gone)}
    assert (tmp_path / "run2" / "outputs" / "c.txt").read_text() == "c.txt\n"
    assert not (tmp_path / "run2" / "outputs" / "b.txt").exists()
    assert not [p for p in run_dir.rglob("*") if "swjob-" in p.name], "temporary files left"


@pytest.mark.parametrize("size", [1 << 20, LARGE_MIN + 3 * CHUNK], ids=["small", "chunked"])
async def test_a_file_rewritten_during_the_pull_never_lands_as_verified(
    tmp_path: Path, rewrite: Any, size: int
) -> None:
    node, run_dir = tmp_path / "node", tmp_path / "run"
    node.mkdir()
    (node / "steady.txt").write_text("steady\n")
    writer = rewrite(node / "hot.bin", size)
    async with loopback_pair(node) as link:
        result = await pull_outputs(link, ["hot.bin", "steady.txt"], run_dir, lambda p: None)
    assert writer.poll() is None  # positive control: it was rewriting all along
    assert [(e.path, e.reason) for e in result.not_landed] == [("hot.bin", CHANGED)]
    assert result.attempts == 2  # sent once more before it was given up
    assert not (run_dir / "outputs" / "hot.bin").exists()
    assert (run_dir / "outputs" / "steady.txt").read_text() == "steady\n"
    assert manifest_of(run_dir)["hot.bin"] == (False, CHANGED)
    assert not [p for p in run_dir.rglob("*") if "swjob-" in p.name], "temporary files left"


@pytest.mark.parametrize("size", [1 << 20, LARGE_MIN + 3 * CHUNK], ids=["small", "chunked"])
async def test_a_file_rewritten_during_the_push_is_left_out_never_landed(
    tmp_path: Path, rewrite: Any, size: int
) -> None:
    src, node = tmp_path / "src", tmp_path / "node"
    src.mkdir()
    (src / "steady.txt").write_text("steady\n")
    writer = rewrite(src / "hot.bin", size)
    async with loopback_pair(node) as link:
        result = await push_workspace(link, src, [], lambda p: None)
    assert writer.poll() is None
    assert f"left out 'hot.bin': {CHANGED}" in result.refused
    assert result.attempts == 2
    assert not (node / "hot.bin").exists()
    assert (node / "steady.txt").read_text() == "steady\n"
    assert not [p for p in node.rglob("*") if "swjob-" in p.name], "temporary files left"


class CountingLink:
    """The engine's link, counting the bytes that arrive from the node."""

    def __init__(self, link: Any) -> None:
        self._link, self.received = link, 0

    async def open_bi(self) -> Any:
        bi = await self._link.open_bi()
        counter = self

        class Recv:
            def __init__(self, inner: Any) -> None:
                self._inner = inner

            async def read(self, size_limit: int) -> bytes:
                return counter.count(await self._inner.read(size_limit))

            async def read_exact(self, size: int) -> bytes:
                return counter.count(await self._inner.read_exact(size))

        class Bi:
            def send(self) -> Any:
                return bi.send()

            def recv(self) -> Any:
                return Recv(bi.recv())

        return Bi()

    def count(self, data: bytes) -> bytes:
        self.received += len(data)
        return data


SPARSE = 256 << 20  # 64 chunks: the holes are what is under test, not the size


async def test_a_256mib_sparse_output_lands_sparse_without_its_zeros_on_the_wire(
    tmp_path: Path,
) -> None:
    """Data at its start, across a chunk boundary mid-file and in its last partial chunk;
    holes between. (It was 2 GiB: every byte of it, holes too, is hashed on each side for
    the whole-file check, ~5 CPU-s; neither a hole nor the wire's offsets (JSON numbers)
    behave otherwise at 256 MiB, and a landing that wrote the holes or sent the zeros
    would still put 4x (disk) or 8x (wire) the bounds below there.)"""
    node, run_dir = tmp_path / "node", tmp_path / "run"
    node.mkdir()
    data = {0: os.urandom(1000), SPARSE // 2: os.urandom(CHUNK + 5), SPARSE - 7: os.urandom(7)}
    with (node / "sparse.bin").open("wb") as f:
        f.truncate(SPARSE)
        for offset, block in data.items():
            f.seek(offset)
            f.write(block)
    async with loopback_pair(node) as link:
        counting = CountingLink(link)
        result = await pull_outputs(counting, ["sparse.bin"], run_dir, lambda p: None)
    landed = run_dir / "outputs" / "sparse.bin"
    assert result.not_landed == [] and landed.stat().st_size == SPARSE
    with landed.open("rb") as f:
        for offset, block in data.items():
            f.seek(offset)
            assert f.read(len(block)) == block
    assert landed.stat().st_blocks * 512 < SPARSE // 4, "the holes were written out"
    assert counting.received < SPARSE // 8, "the zero runs were sent"
    assert manifest_of(run_dir)["sparse.bin"] == (True, None)


async def test_an_output_too_big_for_the_landing_disk_is_refused_before_it_lands(
    tmp_path: Path,
) -> None:
    node = tmp_path / "node"
    node.mkdir()
    (node / "big.bin").write_bytes(os.urandom(24 << 20))
    (node / "small.txt").write_text("fits\n")
    with tmpfs(tmp_path / "landing", "16m") as disk:
        run_dir = disk.path / "run"
        async with loopback_pair(node) as link:
            result = await pull_outputs(link, ["big.bin", "small.txt"], run_dir, lambda p: None)
        assert [e.path for e in result.not_landed] == ["big.bin"]
        reason = result.not_landed[0].reason or ""
        assert reason.startswith("refused: needs 24.0 MiB, only ") and str(disk.path) in reason
        assert (run_dir / "outputs" / "small.txt").read_text() == "fits\n"
        assert not (run_dir / "outputs" / "big.bin").exists()
        assert not [p for p in run_dir.rglob("*") if "swjob-" in p.name]
        assert manifest_of(run_dir)["big.bin"] == (False, reason)


@pytest.mark.parametrize("landers_after", [1 << 30, 0], ids=["threads", "landers"])
async def test_small_outputs_that_do_not_all_fit_land_until_the_disk_is_full_each_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, landers_after: int
) -> None:
    """A batch of small files is admitted at once when it fits; when it does not, each
    file is checked alone: those that fit land, each of the others is refused by name.
    The same where the batch lands in a landing process (a long pull's later batches)."""
    monkeypatch.setattr(transfer, "LANDERS_AFTER", landers_after)
    node = tmp_path / "node" / "out"
    node.mkdir(parents=True)
    sizes = {f"out/f{i:02}.bin": 64 << 10 for i in range(40)}  # 2.5 MiB: batches of 256 KiB up
    for path, size in sizes.items():
        (node.parent / path).write_bytes(os.urandom(size))
    run_dir = tmp_path / "run"  # its manifest beside the full disk, not on it
    with tmpfs(run_dir / "outputs", "1m"), handed_to_landers() as handed:
        async with loopback_pair(node.parent) as link:
            result = await pull_outputs(link, ["out"], run_dir, lambda p: None)
        landed = [e.path for e in result.files if e.verified]
        assert landed and result.not_landed
        assert all(
            (e.reason or "").startswith("refused: needs 64.0 KiB") for e in result.not_landed
        )
        for path in landed:
            assert (run_dir / "outputs" / path).read_bytes() == (node.parent / path).read_bytes()
        assert not [p for p in run_dir.rglob("*") if "swjob-" in p.name]
        assert bool(handed) == (landers_after == 0), "batches went where they should not"
