"""Rows an engine could not write into the index before it ended are kept beside it, and
the next process to open the index writes them in: under each run's lease, so a run a
live owner drives is left to it, and an ended run's lock file goes as at its end."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine.report.views import RunView
from engine.state import ownership, spill, store
from engine.state.locked import StateNotWritten
from engine.state.paths import state_dir
from engine.state.store import Store
from tests.support.sqlitelock import locked

AT = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
NEXT = ("run-b", {"number": 2})


def view(run_id: str = "run-a", finished: bool = False) -> RunView:
    return RunView(
        run_id=run_id, job_name="job", pool="p", state="COMPLETED" if finished else "RUNNING",
        phase="done" if finished else "run", created=AT, updated=AT, run_dir=Path("/runs"),
        finished=AT if finished else None,
    )  # fmt: skip


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(store, "WRITE_WAIT_S", 0.05)  # a held lock fails a save at once
    path = tmp_path / "runs.sqlite"
    Store(path).close()
    yield path


def kept_by_a_closing_engine(index: Path, *rows: RunView) -> None:
    """As an engine closing while another process holds the index leaves them."""
    ours = Store(index)
    with locked(index):
        for row in rows:
            with pytest.raises(StateNotWritten):
                ours.save(row, {"token": "t"}, NEXT if row.run_id == "run-a" else None)
        ours.keep_unwritten()
    ours.close()
    assert spill.kept(index) == sorted(r.run_id for r in rows)


def test_the_next_open_writes_the_kept_rows_in(index: Path) -> None:
    kept_by_a_closing_engine(index, view("run-a"), view("run-c"))
    later = Store(index)
    assert {v.run_id for v, _ in later.unfinished()} == {"run-a", "run-c"}
    assert later.recovery("run-a") == {"token": "t"}
    assert later.next_run("run-a") == "run-b"  # the attempt after it, with it
    assert spill.kept(index) == []


def test_a_run_with_a_live_owner_keeps_its_file(index: Path) -> None:
    """Its owner wrote the file in before it could drive the run (and removed it): a
    file found under someone else's lease is not ours to apply."""
    kept_by_a_closing_engine(index, view())
    lease = ownership.acquire("run-a")
    assert lease is not None
    try:
        assert Store(index).unfinished() == []
        assert spill.kept(index) == ["run-a"]
    finally:
        lease.release()
    assert [v.run_id for v, _ in Store(index).unfinished()] == ["run-a"]


def test_an_ended_runs_lock_file_goes_once_its_end_is_written_in(index: Path) -> None:
    kept_by_a_closing_engine(index, view(finished=True))
    lease = ownership.acquire("run-a")  # as its engine held it, then let go at close
    assert lease is not None
    lease.release()
    lock_file = state_dir() / "leases" / "run-a.lock"
    assert lock_file.exists()
    found = Store(index).find("run-a")
    assert found is not None and found.finished == AT
    assert not lock_file.exists()


def test_a_held_index_leaves_the_files_for_a_later_try(index: Path) -> None:
    kept_by_a_closing_engine(index, view())
    with locked(index):
        opened = Store(index)  # opens all the same
        assert spill.kept(index) == ["run-a"]
        with pytest.raises(StateNotWritten, match="locked by another process"):
            opened.write_in_kept()
    opened.write_in_kept()  # as the console's next adoption scan does
    assert [v.run_id for v, _ in opened.unfinished()] == ["run-a"]
    assert spill.kept(index) == []


def test_an_unreadable_kept_file_is_left_and_the_index_opens(
    index: Path, caplog: pytest.LogCaptureFixture
) -> None:
    misnamed = json.dumps(
        {"view": view("run-a").model_dump(mode="json"), "recovery": None, "next": None}
    )
    spill.keep(index, {
        "run-x": "{not json",
        "run-y": '{"view": {}, "recovery": null, "next": null}',  # not a run's summary
        "run-z": misnamed,  # another run's row under this run's lease: not applied
    })  # fmt: skip
    opened = Store(index)
    assert opened.unfinished() == []
    assert spill.kept(index) == ["run-x", "run-y", "run-z"]
    assert "unreadable, left as it is" in caplog.text
    assert not any(ownership.has_live_owner(r) for r in ("run-x", "run-y", "run-z"))


def test_a_kept_row_is_not_applied_over_the_end_a_later_owner_wrote(index: Path) -> None:
    """The index held when the run's adopter opened it (the file could not be written
    in), freed later: the adopter carried the run on from the index's older row and its
    landing dir, to its end. The stale file, written in after, made the run unfinished
    again (and the next console adopted a run long over)."""
    Store(index).save(view("run-a"))  # its first rows got in
    later = AT.replace(hour=9)
    kept_by_a_closing_engine(index, view("run-a").model_copy(update={"updated": later}))
    lease = ownership.acquire("run-a")  # the adopter
    assert lease is not None
    ended = view("run-a", finished=True).model_copy(update={"updated": later.replace(hour=10)})
    Store(index).save(ended)
    lease.release(finished=True)
    opened = Store(index)
    assert opened.unfinished() == []
    found = opened.find("run-a")
    assert found is not None and found.finished == AT
    assert spill.kept(index) == [], "a stale file goes"
    assert not (state_dir() / "leases" / "run-a.lock").exists()


BROKEN = ["not utf-8", "mode 000", "a directory", "a fifo", "a symlink", "odd types", "no lock"]


@pytest.mark.parametrize("broken", BROKEN)
def test_a_broken_kept_file_is_left_and_the_index_opens(
    index: Path, broken: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever is in the folder, every swjob command still opens the index, at once."""
    where = spill.folder(index)
    where.mkdir(mode=0o700)
    path = where / "run-a.json"
    if broken == "not utf-8":
        path.write_bytes(b'{"view": "\xff\xfe"}')
    elif broken == "mode 000":
        spill.keep(index, {"run-a": "{}"})
        path.chmod(0)
    elif broken == "a directory":
        path.mkdir()
    elif broken == "a fifo":
        os.mkfifo(path)  # opening it to read waited for a writer: for good
    elif broken == "odd types":  # the console's adoption read `recovery` as a dict
        row = {"view": view().model_dump(mode="json"), "recovery": 5, "next": [1, 2]}
        spill.keep(index, {"run-a": json.dumps(row)})
    elif broken == "no lock":  # no lock file can be made (a full disk): the row waits
        spill.keep(index, {"run-a": json.dumps({"view": view().model_dump(mode="json"),
                                                 "recovery": None, "next": None})})  # fmt: skip
        assert not (state_dir() / "leases").exists()
        (state_dir() / "leases").write_text("in the way")
    else:
        target = where / "elsewhere"
        target.write_text(json.dumps({"view": view().model_dump(mode="json"), "recovery": None,
                                      "next": None}))  # fmt: skip
        path.symlink_to(target)  # never one of ours
    started = time.monotonic()
    opened = Store(index)
    assert time.monotonic() - started < 5
    assert opened.unfinished() == []
    assert spill.kept(index) == ["run-a"]
    assert "left as it is" in caplog.text or "waits" in caplog.text
    if broken != "no lock":
        assert not ownership.has_live_owner("run-a")


def test_a_huge_kept_file_is_not_read(index: Path, caplog: pytest.LogCaptureFixture) -> None:
    where = spill.folder(index)
    where.mkdir(mode=0o700)
    with (where / "run-a.json").open("wb") as out:
        out.truncate(8 << 30)  # sparse: 8 GiB that read_text tried to hold in memory
    opened = Store(index)
    assert opened.unfinished() == []
    assert "left as it is" in caplog.text


def test_an_adopter_reads_the_kept_row_when_it_is_newer_than_the_index(index: Path) -> None:
    """The index held from mid-run on: its row says the run step had not started, the
    kept row (its owner quit with `l`) says it had. Adopted from the index's row, the
    step was sent again — the job run twice — and the node's handle, re-attach facts and
    last sequence number were an older owner's. Under the lease the kept row is the run's."""
    Store(index).save(view("run-a"), {"token": "t", "started": ["setup"]})
    later = view("run-a").model_copy(update={"updated": AT.replace(hour=9)})
    ours = Store(index)
    with locked(index):
        with pytest.raises(StateNotWritten):
            ours.save(later, {"token": "t", "started": ["setup", "run"]})
        ours.keep_unwritten()
        lease = ownership.acquire("run-a")  # the adopter, the index still held
        assert lease is not None
        found = Store(index).adoptable_run("run-a")
        lease.release()
    assert found is not None
    assert found[0].updated == later.updated and found[1]["started"] == ["setup", "run"]


def test_an_adopter_leaves_a_run_whose_kept_row_ended_it(index: Path) -> None:
    Store(index).save(view("run-a"))
    kept_by_a_closing_engine(index, view("run-a", finished=True))
    with locked(index):
        lease = ownership.acquire("run-a")
        assert lease is not None
        assert Store(index).adoptable_run("run-a") is None
        lease.release()
    assert Store(index).adoptable_run("run-a") is None  # written in: ended in the index


def test_an_adopter_reads_the_index_row_when_the_kept_one_is_stale(index: Path) -> None:
    kept_by_a_closing_engine(index, view("run-a"))
    lease = ownership.acquire("run-a")
    assert lease is not None
    newer = view("run-a").model_copy(update={"updated": AT.replace(hour=11)})
    Store(index).save(newer, {"token": "later"})
    found = Store(index).adoptable_run("run-a")
    lease.release()
    assert found is not None and found[1] == {"token": "later"}


def test_a_kept_file_that_cannot_be_removed_leaves_the_index_open(
    index: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Its folder made read-only (`chmod a-w`; root's tests cannot make that refuse, so
    the refusal is the unlink's): written in, the row stays in; Store() raised
    PermissionError, so `swjob runs` and every other command ended in a traceback."""
    kept_by_a_closing_engine(index, view())
    unlink = Path.unlink

    def refused(path: Path, missing_ok: bool = False) -> None:
        if path.parent == spill.folder(index):
            raise PermissionError(13, "Permission denied", str(path))
        unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", refused)
    opened = Store(index)
    assert [v.run_id for v, _ in opened.unfinished()] == ["run-a"]
    assert "Permission denied" in caplog.text
    monkeypatch.undo()
    assert [v.run_id for v, _ in Store(index).unfinished()] == ["run-a"]  # written in again
    assert spill.kept(index) == []


def test_kept_rows_are_private_whatever_was_there_before(index: Path, tmp_path: Path) -> None:
    """They hold join tokens. A temp file left with another mode (or a symlink) was
    truncated and written through, keeping its mode (or writing the tokens where it
    pointed); a folder made with other users' bits kept them."""
    where = spill.folder(index)
    where.mkdir(mode=0o755)
    where.chmod(0o755)
    (where / ".run-a.tmp").write_text("old")
    (where / ".run-a.tmp").chmod(0o644)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    (where / ".run-b.tmp").symlink_to(elsewhere)
    spill.keep(index, {"run-a": '{"token": "t"}', "run-b": '{"token": "t"}'})
    assert stat.S_IMODE(where.stat().st_mode) == 0o700
    for run_id in ("run-a", "run-b"):
        kept = where / f"{run_id}.json"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and not kept.is_symlink()
    assert elsewhere.read_text() == ""


def test_rows_queued_apart_are_written_in_one_commit_each_the_latest(index: Path) -> None:
    """The writer thread queues a pass's saves and commits them once: a run's latest row
    wins, keeping an earlier row's recovery facts, and a queued row is not `unwritten`."""
    ours = Store(index)
    ours.queue(view("run-a"), {"token": "t"})
    ours.queue(view("run-c"))
    ours.queue(view("run-a", finished=True))
    assert ours.unwritten() == []
    ours.commit_queued()
    assert ours.unwritten() == []
    assert ours.recovery("run-a") == {"token": "t"}
    assert {v.run_id for v, _ in ours.unfinished()} == {"run-c"}
    ours.close()
