"""Transfer faults through real runs: a transfer connection cut mid-push and mid-pull
resumes and the result verifies; a node whose disk fills fails with a clear reason; a byte
corrupted on disk after its chunk was verified is caught and never presented as an output."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from agent.transfer.schedule import CHUNK
from engine.engine import Engine
from engine.report import events as ev
from engine.report.datastream import Subscription
from engine.state.paths import cache_dir
from tests.support.disks import tmpfs
from tests.support.engines import engine_with
from tests.support.tap import Tap
from tests.support.waiting import eventually_async

pytestmark = [pytest.mark.timeout(120)]

BIG = 128 * 1024 * 1024
"""32 chunks: a cut at a third leaves most of the file to resume, and moving it is quick."""


def random_file(path: Path, size: int) -> str:
    """Write `size` random bytes; their SHA-256."""
    digest = hashlib.sha256()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        for _ in range(size // (16 << 20)):
            block = os.urandom(16 << 20)
            digest.update(block)
            out.write(block)
    return digest.hexdigest()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


class At(Subscription):
    """Acts on the run once, inside the engine's `publish` of the first event `matches`
    accepts: the act lands at that very moment, however fast the run goes on (an awaited
    event can come after what it announced is over)."""

    def __init__(
        self, engine: Engine, matches: Callable[[ev.Event], bool], act: Callable[[str], None]
    ) -> None:
        super().__init__(engine.stream, maxsize=1)
        self._matches = matches
        self._act = act
        self.at: ev.Event | None = None
        self.reached = asyncio.Event()
        engine.stream._subs.add(self)

    def _offer(self, event: ev.Event | None) -> None:
        if self.at is None and event is not None and self._matches(event):
            self.at = event
            self._act(event.run_id)
            self.reached.set()


def at_progress(engine: Engine, direction: str, fraction: float, act: Callable[[str], None]) -> At:
    """`act` at the first `direction` progress past `fraction` with bytes still to go: the
    transfer publishes its progress as it moves bytes, so it is held mid-transfer."""

    def matches(event: ev.Event) -> bool:
        return (
            isinstance(event, ev.TransferProgress)
            and event.direction.value == direction
            and fraction * event.bytes_total <= event.bytes_done < event.bytes_total
        )

    return At(engine, matches, act)


def cut_at(engine: Engine, direction: str) -> At:
    """Close the node's transfer connection once a third of `direction` moved."""

    def cut(run_id: str) -> None:
        engine._server.sessions[run_id]._xfer.close(7, b"cut by test")

    return at_progress(engine, direction, 1 / 3, cut)


def resumed_from(tap: Tap, cut: At) -> tuple[int, int, datetime]:
    """(least bytes_done reported after the cut, total, time the transfer finished)."""
    assert isinstance(cut.at, ev.TransferProgress), "the transfer was never cut"
    later = [
        e
        for _, e in tap.seen
        if isinstance(e, ev.TransferProgress)
        and e.direction == cut.at.direction
        and e.seq > cut.at.seq
    ]
    done = next(e for e in later if e.done)
    return min(e.bytes_done for e in later), done.bytes_total, done.ts


async def test_cut_push_and_pull_resume_and_verify(tmp_path, make_job, record_fault) -> None:
    digest = random_file(tmp_path / "project" / "data" / "big.bin", BIG)
    job = make_job(
        run="sha256sum data/big.bin > sums.txt && cp data/big.bin out.bin",
        workspace={"workdir": "."},
        outputs=["sums.txt", "out.bin"],
    )
    async with engine_with(tmp_path / "runs") as engine:
        tap = Tap(engine)
        cuts = {name: cut_at(engine, name) for name in ("push", "pull")}
        run_id = await engine.submit(job, "local")
        view = await asyncio.wait_for(engine.wait(run_id), 90)
        tap.close()
    assert view.state == "COMPLETED", view.reason
    assert (view.run_dir / "outputs" / "sums.txt").read_text().split()[0] == digest  # push exact
    assert sha256_of(view.run_dir / "outputs" / "out.bin") == digest  # pull exact
    manifest = {
        e["path"]: e for e in json.loads((view.run_dir / "manifest.json").read_text())["files"]
    }
    assert manifest["out.bin"]["verified"] and manifest["out.bin"]["sha256"] == digest
    for name, cut in cuts.items():
        least, total, done_t = resumed_from(tap, cut)
        # A resumed transfer's progress starts again at what the node had verified; one
        # started over, at 0. What was sent but not yet landed at the cut is lost: up to
        # a chunk or two a stream under load (a third moved, 44 MB, once resumed from
        # 29 MB), so the bound is whole chunks kept, not a share of the file.
        kept = least >= 2 * CHUNK
        assert kept, f"{name} restarted from {least} of {total} bytes: no resume"
        after = (done_t - cut.at.ts).total_seconds()
        record_fault(
            f"transfer connection closed at ⅓ of a {BIG >> 20} MiB {name}",
            None,
            f"resumed from ≥ {least / total:.0%}, done {after:.1f} s after the cut; "
            "COMPLETED, SHA-256 matches",
        )


@pytest.fixture
def small_node_disk() -> Iterator[Path]:
    """The local pool's node directories on a 48 MiB tmpfs: a node with a small disk."""
    with tmpfs(cache_dir() / "nodes", "48m") as disk:
        yield disk.path


async def test_push_onto_a_full_disk_fails_clearly(
    tmp_path, make_job, small_node_disk, record_fault
) -> None:
    random_file(tmp_path / "project" / "data" / "big.bin", 64 << 20)
    job = make_job(run="echo SHOULD-NOT-RUN", workspace={"workdir": "."})
    async with engine_with(tmp_path / "runs") as engine:
        view = await asyncio.wait_for(engine.wait(await engine.submit(job, "local")), 60)
    assert view.state == "FAILED"
    assert view.reason.startswith("transfer failed: ") and "No space left on device" in view.reason
    assert "big.bin" in view.reason
    assert not (view.run_dir / "logs" / "run.log").exists()
    assert list(small_node_disk.iterdir()) == []  # the node was torn down
    record_fault("node disk full during the workspace push", None, f"FAILED '{view.reason}'")


async def test_job_filling_the_disk_fails_clearly(
    tmp_path, make_job, small_node_disk, record_fault
) -> None:
    # the disk is full to the last page before the step's first log line is written; the job
    # goes on after its failed write and exits with that write's status (the exit code decides)
    fill = (
        "head -c 64M /dev/zero > fill.bin; rc=$?; head -c 1M /dev/zero > fill2.bin; "
        "echo after-fill; exit $rc"
    )
    job = make_job(run=fill, outputs=["fill.bin"])
    async with engine_with(tmp_path / "runs") as engine:
        view = await asyncio.wait_for(engine.wait(await engine.submit(job, "local")), 15)
    log = (view.run_dir / "logs" / "run.log").read_text()
    assert view.state == "FAILED" and view.reason == "run exited with code 1", view.reason
    assert "after-fill" in log and "No space left on device" in log
    assert "[swjob] node log write failed: No space left on device" in log
    assert list(small_node_disk.iterdir()) == []
    record_fault("node disk filled by the job", None, f"FAILED '{view.reason}'")


def _written_chunk(part: Path) -> int:
    """Offset of a chunk already landed in a `.part` file (its last page is no longer a hole)."""
    with part.open("rb") as f:
        for index in range(part.stat().st_size // CHUNK):
            f.seek((index + 1) * CHUNK - 4096)
            if any(f.read(4096)):
                return index * CHUNK
    raise AssertionError("no chunk landed yet")


async def test_a_byte_corrupted_after_verification_is_never_an_output(
    tmp_path, make_job, record_fault
) -> None:
    job = make_job(
        run="head -c 64M /dev/urandom > out.bin && sha256sum out.bin", outputs=["out.bin"]
    )
    async with engine_with(tmp_path / "runs") as engine:
        frozen: list[int] = []

        def freeze(run_id: str) -> None:  # hold the pull still while the disk is "corrupted"
            frozen.append(int(engine.run(run_id).node.offer["pid"]))
            os.kill(frozen[0], signal.SIGSTOP)

        held = at_progress(engine, "pull", 1 / 4, freeze)
        run_id = await engine.submit(job, "local")
        await asyncio.wait_for(held.reached.wait(), 60)
        try:
            part = engine.run(run_id).run_dir / "outputs" / ".out.bin.swjob-part"
            with part.open("r+b") as f:
                f.seek(_written_chunk(part))
                byte = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([byte[0] ^ 0xFF]))
        finally:
            os.kill(frozen[0], signal.SIGCONT)
        view = await asyncio.wait_for(engine.wait(run_id), 60)
        held.close()
    true_sha = (view.run_dir / "logs" / "run.log").read_text().split()[0]
    landed = view.run_dir / "outputs" / "out.bin"
    # caught before the file took its name, then sent once more: the true bytes land
    assert view.state == "COMPLETED", view.reason
    assert sha256_of(landed) == true_sha, "a corrupted file was landed"
    manifest = json.loads((view.run_dir / "manifest.json").read_text())
    assert manifest["complete"] is True
    assert [(e["path"], e["verified"]) for e in manifest["files"]] == [("out.bin", True)]
    assert not part.exists(), "the failed pass's partial file was left behind"
    record_fault(
        "one byte of a pulled chunk flipped on disk",
        None,
        "re-sent once; COMPLETED, SHA-256 matches",
    )


async def test_a_transfer_connection_dead_as_collection_starts_is_waited_for(
    tmp_path, make_job, record_fault
) -> None:
    """The node's transfer connection dies as its job exits, and the node is too busy to
    redial it before collection starts: the pull waits for the new one, as it does for a
    connection that dies mid-transfer, instead of failing a run whose job succeeded."""
    job = make_job(run="echo out > out.txt", outputs=["out.txt"])
    async with engine_with(tmp_path / "runs") as engine:
        frozen: list[int] = []
        cut: list[object] = []

        def cut_dead(run_id: str) -> bool:
            """Close the node's transfer connection, once, if it has one: its node is frozen.
            On a loaded machine the node may not have dialed it yet (frozen, it will not,
            and the pull waits for it all the same), or its dial was in flight as it froze
            and lands after: as dead, and cut as well. True: none is left."""
            xfer = engine._server.sessions[run_id]._xfer
            if xfer is not None and xfer not in cut:
                cut.append(xfer)
                xfer.close(7, b"cut by test")
            return xfer is None

        def cut_and_freeze(run_id: str) -> None:
            frozen.append(int(engine.run(run_id).node.offer["pid"]))
            os.kill(frozen[0], signal.SIGSTOP)
            cut_dead(run_id)

        def job_exited(event: ev.Event) -> bool:
            return isinstance(event, ev.Transition) and event.cause == "JobExited"

        exited = At(engine, job_exited, cut_and_freeze)
        run_id = await engine.submit(job, "local")
        try:
            await asyncio.wait_for(exited.reached.wait(), 60)
            # the pull tried the dead connection (and dropped it) before the node came back
            await eventually_async(lambda: cut_dead(run_id), 30, "the dead one tried")
        finally:
            for pid in frozen:
                with contextlib.suppress(ProcessLookupError):  # the verdict says why
                    os.kill(pid, signal.SIGCONT)
        view = await asyncio.wait_for(engine.wait(run_id), 60)
        exited.close()
    assert view.state == "COMPLETED", view.reason
    assert (view.run_dir / "outputs" / "out.txt").read_text() == "out\n"
    record_fault(
        "transfer connection dead as collection starts, node frozen meanwhile",
        None,
        "pull waits for the node's new connection; COMPLETED",
    )
