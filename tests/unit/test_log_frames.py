"""Every log batch fits a frame, and an event that cannot is replaced, never resent forever.

A flood of long lines of control characters (6 bytes of JSON each) read while the
batch timer is late (a loaded node) once made a 20 MB LogBatch: the frame limit
refused it, the agent rejoined, replayed it, was refused again, and the run stalled
with its job still running. The batcher now bounds a batch by its encoded size, and
the agent sends a stand-in under the same seq for anything still too large."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.lines import MAX_BATCH_LINES, MAX_LINE, LogBatcher, StepLog
from agent.protocol import (
    MAX_FRAME,
    AgentEvent,
    FrameTooLarge,
    GpuMetrics,
    LogBatch,
    LogLine,
    NodeFault,
    Step,
    Stream,
    encode,
    stand_in_for,
)

WORST_LINE = "\x01" * MAX_LINE  # the longest line the splitter makes, each char 6 bytes


async def test_a_late_timer_never_lets_a_batch_outgrow_a_frame(tmp_path: Path) -> None:
    emitted: list[AgentEvent] = []
    batcher = LogBatcher(Step.RUN, emitted.append, StepLog(tmp_path / "run.log"))
    for _ in range(300):  # all in one loop tick: the flush timer never gets to run
        batcher.add(Stream.STDOUT, WORST_LINE)
    batcher.flush()
    frames = [encode(event) for event in emitted]  # raises FrameTooLarge if one is over
    assert max(len(f) for f in frames) <= MAX_FRAME // 2
    assert [line.text for e in emitted for line in e.lines] == [WORST_LINE] * 300
    assert (tmp_path / "run.log").stat().st_size == 300 * (MAX_LINE + 1)


async def test_short_lines_go_a_full_batch_at_a_time(tmp_path: Path) -> None:
    emitted: list[AgentEvent] = []
    batcher = LogBatcher(Step.RUN, emitted.append, StepLog(tmp_path / "run.log"))
    for n in range(MAX_BATCH_LINES * 2 + 7):
        batcher.add(Stream.STDOUT, str(n))
    batcher.flush()
    assert [len(e.lines) for e in emitted] == [MAX_BATCH_LINES, MAX_BATCH_LINES, 7]


def test_a_log_batch_too_large_for_a_frame_becomes_one_line_saying_so() -> None:
    lines = [LogLine(stream=Stream.STDOUT, text=WORST_LINE)] * 60
    batch = LogBatch(seq=7, step=Step.RUN, lines=lines)
    with pytest.raises(FrameTooLarge) as refused:
        encode(batch)
    stand_in = stand_in_for(batch, refused.value)
    assert isinstance(stand_in, LogBatch) and (stand_in.seq, stand_in.step) == (7, Step.RUN)
    [line] = stand_in.lines
    assert line.stream is Stream.STDERR
    assert line.text.startswith("[swjob] 60 log lines not sent: frame of ")
    assert len(encode(stand_in)) < 1024


def test_any_other_event_too_large_becomes_a_fault_under_its_seq() -> None:
    metrics = GpuMetrics(seq=3, t=0.0, gpus=[])
    stand_in = stand_in_for(metrics, FrameTooLarge("frame of 17000000 bytes exceeds 16777216"))
    assert isinstance(stand_in, NodeFault) and stand_in.seq == 3
    assert stand_in.reason == "gpu event not sent: frame of 17000000 bytes exceeds 16777216"
