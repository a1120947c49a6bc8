"""The run index's history read, which the console makes ten times a second: it must show
every write at once, its own and another process's, while not re-reading an unchanged
index (with 500 runs, each re-read and parse cost ~40 ms of the console's loop)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engine.report.views import RunView
from engine.state.store import Store

AT = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


def view(n: int, state: str = "RUNNING") -> RunView:
    return RunView(
        run_id=f"run{n:04d}", job_name=f"job{n}", pool="p", state=state, phase="run",
        created=AT + timedelta(seconds=n), updated=AT, run_dir=Path("/runs") / f"run{n:04d}",
    )  # fmt: skip


@pytest.fixture
def stores(tmp_path: Path):
    """Two connections to one index: this console's, and another swjob process's."""
    ours, theirs = Store(tmp_path / "runs.sqlite"), Store(tmp_path / "runs.sqlite")
    yield ours, theirs
    ours.close()
    theirs.close()


def states(store: Store) -> dict[str, str]:
    return {v.run_id: v.state for v in store.views()}


def test_every_write_shows_at_once_ours_and_another_process(stores) -> None:
    ours, theirs = stores
    for n in range(3):
        ours.save(view(n))
    assert states(ours) == dict.fromkeys(["run0000", "run0001", "run0002"], "RUNNING")
    ours.save(view(1, "COMPLETED"))
    assert states(ours)["run0001"] == "COMPLETED"
    theirs.save(view(2, "FAILED"))  # another process's write
    assert states(ours)["run0002"] == "FAILED"
    theirs.save(view(3))
    assert [v.run_id for v in ours.views()] == ["run0003", "run0002", "run0001", "run0000"]
    assert [v.run_id for v in ours.views(limit=2)] == ["run0003", "run0002"]


def test_an_unchanged_index_is_neither_read_nor_parsed_again(stores) -> None:
    ours, theirs = stores
    for n in range(3):
        ours.save(view(n))
    first = ours.views()
    again = ours.views()
    assert again == first and all(a is b for a, b in zip(again, first, strict=True))
    theirs.save(view(1, "COMPLETED"))
    changed = ours.views()
    assert changed[1].state == "COMPLETED" and changed[1] is not first[1]
    assert changed[0] is first[0] and changed[2] is first[2]  # unchanged rows: not parsed
    changed.clear()  # a caller's list is its own
    assert len(ours.views()) == 3
