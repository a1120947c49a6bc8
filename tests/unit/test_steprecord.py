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


def test_a_record_is_written_0600_over_a_link_planted_at_its_path(tmp_path: Path) -> None:
    """The job, as the same user, links the record's path to a file of its choice: the
    record replaces the link; the file it pointed at is not written (nor made)."""
    precious, gone = tmp_path / "precious", tmp_path / "not-there"
    precious.write_text("keep me\n")
    state = tmp_path / "state"
    state.mkdir()
    record = StepRecord(4242, MARKER, 1.5)
    for target in (precious, gone):
        path = state / "step.pgid"
        path.unlink(missing_ok=True)
        path.symlink_to(target)
        steprecord.write(path, record)
        assert not path.is_symlink() and steprecord.read(path) == record
        assert path.stat().st_mode & 0o777 == 0o600
    assert precious.read_text() == "keep me\n" and not gone.exists()
    assert [p.name for p in state.iterdir()] == ["step.pgid"]  # no temporary file left


def test_a_record_is_not_written_through_a_linked_directory(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "state").symlink_to(elsewhere)
    with pytest.raises(OSError):
        steprecord.write(tmp_path / "state" / "step.pgid", StepRecord(4242, MARKER, 1.5))
    assert list(elsewhere.iterdir()) == []


def test_a_record_over_a_directory_fails_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "step.pgid").mkdir()
    with pytest.raises(OSError):
        steprecord.write(tmp_path / "step.pgid", StepRecord(4242, MARKER, 1.5))
    assert [p.name for p in tmp_path.iterdir()] == ["step.pgid"]
