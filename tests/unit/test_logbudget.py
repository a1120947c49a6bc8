"""Bounded events.jsonl (engine/report/logbudget.py): floods of control characters, binary
and short lines are written packed and read back as the same lines; plain text stays plain."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.lines import LineSplitter
from agent.protocol import LogLine, Step, Stream
from engine.report import events as ev
from engine.report import logbudget
from engine.report.datastream import Datastream, read_events


def log_of(raw: bytes) -> ev.Log:
    splitter = LineSplitter()
    texts = splitter.feed(raw) + splitter.finish()
    lines = [LogLine(stream=Stream.STDOUT, text=t) for t in texts]
    return ev.Log(run_id="r", step=Step.RUN, lines=lines)


FLOODS = {
    "control chars": b"\x01" * 300_000,
    "binary": os.urandom(300_000),
    "short lines": b"".join(b"%d\n" % i for i in range(6_000)),
    "empty lines": b"\n" * 10_000,
}


@pytest.mark.parametrize("kind", list(FLOODS))
async def test_a_flood_is_packed_within_budget_and_reads_back_the_same(
    tmp_path: Path, kind: str
) -> None:
    raw = FLOODS[kind]
    event = log_of(raw)
    plain = len(event.model_dump_json())
    stream = Datastream()
    stream.open_run("r", tmp_path / "events.jsonl")
    stream.publish(event)
    stream.close()
    written = (tmp_path / "events.jsonl").stat().st_size
    assert written <= 1.5 * len(raw), (written, len(raw))
    assert plain > 1.5 * len(raw)  # positive control: plain JSON would have blown the budget
    (back,) = read_events(tmp_path / "events.jsonl")
    assert isinstance(back, ev.Log) and back.lines == event.lines


def test_ordinary_text_stays_plain_json() -> None:
    """Lines of ordinary length fit the budget as they are: they stay greppable."""
    line = (
        b"epoch 1/10 step 100/1000 loss 0.2500 accuracy 0.9100 lr 3e-4 grad_norm 1.25 (12.5 it/s)"
    )
    event = log_of((line + b"\n") * 50)
    assert logbudget.dump(event) == event.model_dump_json()


def test_packed_lines_keep_the_log_marker_the_console_history_looks_for() -> None:
    line = logbudget.dump(log_of(b"\x02" * 100_000))
    assert '"packed"' in line and '"kind":"log"' in line
    assert ev.parse_event(line).lines[0].text.startswith("\x02")
