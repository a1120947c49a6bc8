"""The step record (agent/steprecord.py) is read back after the agent died, from a path the
job could write: only exactly what the agent writes is a record, anything else is None."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent import steprecord
from agent.steprecord import StepRecord

MARKER = "SWJOB_STEP_ID=0123456789abcdef"
GOOD = {"pgid": 4242, "marker": MARKER, "started": 1764810000.25}


def test_a_written_record_reads_back(tmp_path: Path) -> None:
    record = StepRecord(4242, steprecord.new_marker(), 1764810000.123456)
    path = tmp_path / "step.pgid"
    path.write_text(record.line())
    assert steprecord.read(path) == record
    assert record.line().count("\n") == 1  # one line


def test_a_fresh_marker_has_the_shape_a_record_accepts() -> None:
    markers = {steprecord.new_marker() for _ in range(3)}
    assert len(markers) == 3
    for marker in markers:
        assert steprecord.parse(json.dumps({**GOOD, "marker": marker}).encode()) is not None


@pytest.mark.parametrize(
    "raw",
    [
        b"4242\n",  # the old format: a bare group id proves nothing
        b"",
        b"\xff\xfe junk",
        b"[4242]",
        json.dumps({"pgid": 4242, "started": 1.0}).encode(),  # no marker
        json.dumps({**GOOD, "extra": 1}).encode(),
        json.dumps({**GOOD, "pgid": "4242"}).encode(),
        json.dumps({**GOOD, "pgid": True}).encode(),
        json.dumps({**GOOD, "pgid": 1}).encode(),  # init
        json.dumps({**GOOD, "pgid": 0}).encode(),  # killpg(0) is our own group
        json.dumps({**GOOD, "pgid": -4242}).encode(),
        json.dumps({**GOOD, "pgid": 2**31}).encode(),  # overflows pid_t
        json.dumps({**GOOD, "pgid": 4242.0}).encode(),
        json.dumps({**GOOD, "marker": "HOME=/root"}).encode(),  # what everyone carries
        json.dumps({**GOOD, "marker": "SWJOB_STEP_ID="}).encode(),
        json.dumps({**GOOD, "marker": MARKER + "\n"}).encode(),
        json.dumps({**GOOD, "marker": 7}).encode(),
        json.dumps({**GOOD, "started": "1.0"}).encode(),
        json.dumps({**GOOD, "started": -1.0}).encode(),
        b'{"pgid": 4242, "marker": "%s", "started": NaN}' % MARKER.encode(),
        b'{"pgid": 4242, "marker": "%s", "started": 1e999}' % MARKER.encode(),
    ],
)
def test_anything_else_is_no_record(raw: bytes) -> None:
    assert steprecord.parse(raw) is None


def test_what_is_not_a_small_regular_file_is_no_record(tmp_path: Path) -> None:
    line, good = StepRecord(4242, MARKER, 1.0).line(), tmp_path / "good"
    good.write_text(line)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # a plain read would wait for a writer forever
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(good)
    (tmp_path / "long").write_text(
        " " * steprecord.MAX_BYTES + StepRecord(4242, MARKER, 1.0).line()
    )
    for name in ("fifo", "dir", "link", "long", "missing"):
        assert steprecord.read(tmp_path / name) is None, name
    assert steprecord.read(good) is not None  # positive control
