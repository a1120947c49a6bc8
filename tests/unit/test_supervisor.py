"""The supervisor against real `/bin/sh` processes: exit codes, streams, redaction, stop."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agent import procgroup, steprecord
from agent.credentials import TOKEN_ENV
from agent.lines import LOG_FAILED, MAX_BATCH_LINES, STDERR_PREFIX, LineSplitter
from agent.protocol import (
    AgentEvent,
    LogBatch,
    NodeFault,
    Step,
    StepExited,
    StepStarted,
    Stream,
)
from agent.redact import MASK
from agent.supervisor import Supervisor
from tests.support.disks import Disk, tmpfs
from tests.support.waiting import Changes

SECRET = "hunter2-very-secret-value"
STOP_BOUND_S = 10.0  # past the 0.3 s grace SIGKILL goes to the group: only a survivor waits


class Recorder:
    """The supervisor's `emit`: keeps events and lets a test await the step's end."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []
        self._ended = asyncio.Event()
        self._changes = Changes()

    def __call__(self, event: AgentEvent) -> None:
        self.events.append(event)
        self._changes.changed()
        if isinstance(event, StepExited | NodeFault):
            self._ended.set()

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait (event-driven) until `predicate` holds over the events seen so far."""
        await self._changes.until(predicate, 20)

    async def ended(self) -> AgentEvent:
        await asyncio.wait_for(self._ended.wait(), 20)
        self._ended.clear()
        return self.events[-1]

    def lines(self, stream: Stream | None = None) -> list[str]:
        return [
            line.text
            for ev in self.events
            if isinstance(ev, LogBatch)
            for line in ev.lines
            if stream is None or line.stream is stream
        ]

    def batches(self) -> list[LogBatch]:
        return [ev for ev in self.events if isinstance(ev, LogBatch)]


def process_alive(pid: int) -> bool:
    """A pid counts as alive unless it is gone or a zombie (a zombie runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
async def sup(tmp_path: Path, rec: Recorder) -> AsyncIterator[Supervisor]:
    (tmp_path / "work").mkdir()
    env = {**os.environ, TOKEN_ENV: "join-token-must-not-leak"}
    s = Supervisor(
        tmp_path / "work",
        tmp_path / "logs",
        rec,
        base_env=env,
        pgid_file=tmp_path / "state" / "step.pgid",
    )
    yield s
    await s.stop(0.1)
    for ev in rec.events:  # belt and braces: nothing a test started may outlive it
        if isinstance(ev, StepStarted) and process_alive(ev.pid):
            os.killpg(ev.pid, signal.SIGKILL)


async def run_step(sup: Supervisor, rec: Recorder, command: str, **env: str) -> AgentEvent:
    await sup.start(Step.RUN, command, env)
    return await rec.ended()


async def test_exit_codes_and_started_event(sup: Supervisor, rec: Recorder) -> None:
    ok = await run_step(sup, rec, "true")
    assert ok == StepExited(seq=0, step=Step.RUN, code=0)
    failed = await run_step(sup, rec, "exit 3")
    assert isinstance(failed, StepExited) and failed.code == 3 and failed.signal is None
    started = [ev for ev in rec.events if isinstance(ev, StepStarted)]
    assert len(started) == 2 and all(ev.pid > 0 for ev in started)


async def test_killed_by_signal_reports_128_plus_n(sup: Supervisor, rec: Recorder) -> None:
    exited = await run_step(sup, rec, "kill -9 $$")
    assert isinstance(exited, StepExited)
    assert (exited.code, exited.signal, exited.stopped) == (137, 9, False)


async def test_streams_tagged_in_events_and_log(
    sup: Supervisor, rec: Recorder, tmp_path: Path
) -> None:
    await run_step(sup, rec, "echo to-out; echo to-err >&2; pwd")
    assert rec.lines(Stream.STDOUT) == ["to-out", str(tmp_path / "work")]
    assert rec.lines(Stream.STDERR) == ["to-err"]
    log = (tmp_path / "logs" / "run.log").read_text().splitlines()
    assert sorted(log) == sorted(["to-out", f"{STDERR_PREFIX}to-err", str(tmp_path / "work")])


async def test_env_injected_secret_redacted_token_removed(
    sup: Supervisor, rec: Recorder, tmp_path: Path
) -> None:
    cmd = 'echo "key=$API_KEY"; echo "$API_KEY" >&2; echo "token=${SWJOB_JOIN_TOKEN:-unset}"'
    await run_step(sup, rec, cmd, API_KEY=SECRET)
    assert rec.lines().count(f"key={MASK}") == 1
    assert MASK in rec.lines(Stream.STDERR)
    assert "token=unset" in rec.lines()
    log_text = (tmp_path / "logs" / "run.log").read_text()
    assert f"key={MASK}" in log_text
    assert SECRET not in log_text
    assert all(SECRET not in ev.model_dump_json() for ev in rec.events)


async def test_partial_long_and_binary_lines(sup: Supervisor, rec: Recorder) -> None:
    cmd = (
        r"printf 'a\r\nb\rc\n'; printf '\377\376 ok\n'; "
        r"head -c 150000 /dev/zero | tr '\0' x; echo; printf 'no-newline-at-end'"
    )
    await run_step(sup, rec, cmd)
    lines = rec.lines()
    assert lines[:4] == ["a", "b\r", "c", "\ufffd\ufffd ok"]  # a lone CR is kept: a progress update
    assert [len(x) for x in lines[4:7]] == [65536, 65536, 150000 - 2 * 65536]
    assert set("".join(lines[4:7])) == {"x"}
    assert lines[7:] == ["no-newline-at-end"]


def test_splitter_joins_pieces_across_chunks() -> None:
    s = LineSplitter(max_line=8)
    euro = "€".encode()
    assert s.feed(b"ab\r") == []
    assert s.feed(b"\ncd" + euro[:1]) == ["ab"]
    assert s.feed(euro[1:] + b"\n0123456789") == ["cd€", "01234567"]
    assert s.finish() == ["89"]
    assert s.finish() == []


async def test_stop_kills_tree_including_term_ignoring_child(
    sup: Supervisor, rec: Recorder, tmp_path: Path
) -> None:
    cmd = (
        "sh -c 'trap \"\" TERM; echo pid $$; exec sleep 1000' & "
        "sleep 1000 & echo pid $!; echo pid $$; wait"
    )
    await sup.start(Step.RUN, cmd, {})
    pgid_file = tmp_path / "state" / "step.pgid"
    started = rec.events[0]
    assert isinstance(started, StepStarted)
    record = steprecord.read(pgid_file)
    assert record is not None and record.pgid == started.pid
    assert started.pid in procgroup.marked(record.marker, record.started)  # the step's own
    await rec.until(lambda: len([x for x in rec.lines() if x.startswith("pid ")]) == 3)
    pids = [int(x.split()[1]) for x in rec.lines() if x.startswith("pid ")]
    assert all(process_alive(p) for p in pids)
    try:  # a stop that signals the group leader alone waits on the survivors' pipe for good
        await asyncio.wait_for(sup.stop(0.3), STOP_BOUND_S)
    except TimeoutError:
        survivors = [p for p in pids if process_alive(p)]
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
        pytest.fail(f"stop did not end within {STOP_BOUND_S:g} s: child survived {survivors}")
    exited = rec.events[-1]
    assert isinstance(exited, StepExited)
    assert exited.stopped and exited.code == 128 + signal.SIGTERM
    assert not any(process_alive(p) for p in pids), "child survived the stop"
    assert not pgid_file.exists()
    assert not sup.busy


async def test_the_step_record_is_not_written_through_a_link_the_job_planted(
    sup: Supervisor, rec: Recorder, tmp_path: Path
) -> None:
    """A previous step (same user) left a link at the record's path to a file of its
    choice: the next step's record replaces the link; that file is untouched."""
    target = tmp_path / "target"
    target.write_text("the job's file\n")
    pgid_file = tmp_path / "state" / "step.pgid"
    pgid_file.parent.mkdir()
    pgid_file.symlink_to(target)
    await sup.start(Step.RUN, "sleep 1000", {})
    started = rec.events[0]
    assert isinstance(started, StepStarted)
    assert not pgid_file.is_symlink()
    record = steprecord.read(pgid_file)
    assert record is not None and record.pgid == started.pid
    assert target.read_text() == "the job's file\n"
    await sup.stop(0.3)
    assert not pgid_file.exists() and target.read_text() == "the job's file\n"


async def test_leftover_children_die_with_the_step(sup: Supervisor, rec: Recorder) -> None:
    await run_step(sup, rec, "sleep 1000 & echo pid $!; exit 0")
    pid = int(rec.lines()[0].split()[1])
    assert not process_alive(pid)
    assert rec.events[-1] == StepExited(seq=0, step=Step.RUN, code=0)


FLOOD_LINES = 20_000  # a flood: 80 batches' worth


def batch_bound(lines: int, seconds: float) -> int:
    """At most one batch per MAX_BATCH_LINES lines plus one per 50 ms tick (a slow writer,
    a busy box)."""
    return lines // MAX_BATCH_LINES + int(seconds / 0.05) + 2


async def test_flood_is_batched(sup: Supervisor, rec: Recorder) -> None:
    t0 = time.monotonic()
    await run_step(sup, rec, f"seq 1 {FLOOD_LINES}")
    elapsed = time.monotonic() - t0
    batches = rec.batches()
    assert rec.lines() == [str(i) for i in range(1, FLOOD_LINES + 1)]
    assert max(len(b.lines) for b in batches) <= MAX_BATCH_LINES
    assert len(batches) <= batch_bound(FLOOD_LINES, elapsed)
    assert len(batches) < FLOOD_LINES // 50  # lines never become anything like a frame each


FLOOD = f"python3 -c \"import sys; sys.stdout.write(('x' * 200 + chr(10)) * {FLOOD_LINES})\""
# were the lines kept, ~5 MB as str objects (249 bytes each); batches let go peak at ~0.4 MB
PEAK_BOUND = 2 * 1024 * 1024


async def test_flood_memory_stays_bounded(tmp_path: Path) -> None:
    """20k lines of 200 characters (~5 MB as str objects, were they all kept) through
    the supervisor allocate a bounded peak: batches are let go once sent."""
    counts = {"lines": 0, "batches": 0}
    done = asyncio.Event()

    def count(ev: AgentEvent) -> None:
        if isinstance(ev, LogBatch):
            counts["lines"] += len(ev.lines)
            counts["batches"] += 1
        if isinstance(ev, StepExited):
            done.set()

    sup = Supervisor(tmp_path, tmp_path / "logs", count)
    t0 = time.monotonic()
    tracemalloc.start()
    try:
        await sup.start(Step.RUN, FLOOD, {})
        async with asyncio.timeout(180):  # a hang guard: tracemalloc slows it 2-5x
            await done.wait()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert counts["lines"] == FLOOD_LINES
    assert counts["batches"] <= batch_bound(FLOOD_LINES, time.monotonic() - t0)
    assert peak < PEAK_BOUND


async def test_one_step_at_a_time(sup: Supervisor, rec: Recorder) -> None:
    assert await sup.start(Step.SETUP, "sleep 1000", {})
    assert not await sup.start(Step.RUN, "true", {})
    fault = rec.events[-1]
    assert isinstance(fault, NodeFault) and "another step is running" in fault.reason
    await sup.stop(1.0)
    assert isinstance(rec.events[-1], StepExited) and rec.events[-1].stopped


async def test_spawn_failure_is_a_node_fault(tmp_path: Path, rec: Recorder) -> None:
    missing = tmp_path / "nowhere"
    sup = Supervisor(missing, tmp_path / "logs", rec)
    assert not await sup.start(Step.SETUP, "true", {})
    assert rec.events == [
        NodeFault(seq=0, reason=f"cannot start setup: workdir {missing} does not exist")
    ]
    assert not sup.busy


def log_failures(rec: Recorder) -> list[str]:
    return [x for x in rec.lines(Stream.STDERR) if x.startswith(LOG_FAILED)]


async def test_a_full_disk_loses_the_log_file_never_the_events(
    tmp_path: Path, rec: Recorder, small_disk: Disk
) -> None:
    (tmp_path / "work").mkdir()
    state = small_disk.path / "state"
    sup = Supervisor(tmp_path / "work", small_disk.path / "logs", rec, pgid_file=state / "pgid")
    small_disk.fill()
    for code in (3, 0):  # the first step's failure does not stop the next from being supervised
        exited = await run_step(sup, rec, f"seq 1 3000; echo last >&2; exit {code}")
        assert exited == StepExited(seq=0, step=Step.RUN, code=code)
    assert rec.lines(Stream.STDOUT) == [str(i) for i in range(1, 3001)] * 2
    assert log_failures(rec) == [f"{LOG_FAILED}No space left on device"] * 2  # once per step
    assert not sup.busy


async def test_the_disk_filling_mid_step(tmp_path: Path, rec: Recorder) -> None:
    """~170 KB of output into a 128 KiB log disk: a short write, then ENOSPC, mid-flood."""
    (tmp_path / "work").mkdir()
    with tmpfs(tmp_path / "disk", "128k") as disk:
        sup = Supervisor(tmp_path / "work", disk.path / "logs", rec)
        exited = await run_step(sup, rec, "seq 1 30000")
        assert exited == StepExited(seq=0, step=Step.RUN, code=0)
        assert rec.lines(Stream.STDOUT) == [str(i) for i in range(1, 30001)]
        assert log_failures(rec) == [f"{LOG_FAILED}No space left on device"]
        assert 0 < (disk.path / "logs" / "run.log").stat().st_size <= 128 * 1024


async def test_a_daemon_that_left_the_group_dies_with_the_step_too(
    sup: Supervisor, rec: Recorder
) -> None:
    """`setsid` plus a double fork puts a process outside the step's group and session;
    the marker in its environment still ties it to the step."""
    # the step ends once the daemon has said its pid (into a file: the step prints it)
    daemon = "( setsid sh -c 'sleep 1000 & echo pid $! > daemon.pid' & ); "
    wait = "until [ -s daemon.pid ]; do sleep 0.01; done; cat daemon.pid; exit 0"
    await run_step(sup, rec, daemon + wait)
    pid = int(rec.lines()[0].split()[1])
    assert not process_alive(pid), "the escaped daemon outlived its step"
    assert rec.events[-1] == StepExited(seq=0, step=Step.RUN, code=0)


async def test_steps_are_told_their_own_marker(sup: Supervisor, rec: Recorder) -> None:
    await run_step(sup, rec, 'echo "$SWJOB_STEP_ID"')
    await run_step(sup, rec, 'echo "$SWJOB_STEP_ID"')
    first, second = rec.lines()
    assert len(first) == 16 and first != second
