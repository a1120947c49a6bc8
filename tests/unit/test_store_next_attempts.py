"""The run index keeps a chain's next attempt with the end of the attempt before it, and
counts a run as over only once it has finished (its node torn down), not at its verdict."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine.report.views import RunView
from engine.state import store as store_module
from engine.state.locked import StateNotWritten
from engine.state.store import Store

AT = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


def view(run_id: str, state: str, finished: datetime | None = None) -> RunView:
    return RunView(
        run_id=run_id, job_name="j", pool="p", state=state, phase="teardown", created=AT,
        updated=AT, finished=finished, run_dir=Path("/runs/j") / run_id,
    )  # fmt: skip


def test_a_next_attempt_is_recorded_with_the_end_and_started_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.sqlite")
    store.save(view("r1", "FAILED"), {"job_file": "job.toml"})
    assert [v.run_id for v, _ in store.unfinished()] == ["r1"], "a verdict is not the end"
    store.save(view("r1", "FAILED", finished=AT), None, ("r2", {"number": 2, "of": 2}))
    assert store.unfinished() == [] and store.next_run("r1") == "r2"
    assert store.not_started() == ["r2"]
    previous, saved, attempt = store.recorded_attempt("r2") or (None, None, None)
    assert previous is not None and previous.run_id == "r1"
    assert saved == {"job_file": "job.toml"} and attempt == {"number": 2, "of": 2}
    store.save(view("r1", "FAILED", finished=AT), None, ("r3", {"number": 2, "of": 2}))
    assert store.next_run("r1") == "r2", "a replayed end keeps the attempt it recorded"
    store.save(view("r2", "PENDING"))
    assert store.not_started() == [] and store.recorded_attempt("r2") is None
    store.close()


def test_a_row_kept_while_another_process_holds_the_index_keeps_its_next_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's end, saved while the index is held, is kept with the attempt it records;
    the run's later saves (the engine saves a run once more as it lets it go) keep that
    attempt too, and both go in when the index is free."""
    monkeypatch.setattr(store_module, "WRITE_WAIT_S", 0.05)
    store = Store(tmp_path / "runs.sqlite")
    store.save(view("r1", "FAILED"), {"job_file": "job.toml"})
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(StateNotWritten, match=r"runs\.sqlite is locked by another process"):
        store.save(view("r1", "FAILED", finished=AT), None, ("r2", {"number": 2, "of": 2}))
    with pytest.raises(StateNotWritten):
        store.save(view("r1", "FAILED", finished=AT))
    assert store.unwritten() == ["r1"] and store.next_run("r1") is None
    holder.rollback()
    holder.close()
    store.retry()
    assert store.unwritten() == [] and store.unfinished() == []
    assert store.next_run("r1") == "r2" and store.recovery("r1") == {"job_file": "job.toml"}
    store.close()
