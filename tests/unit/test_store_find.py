"""`swjob logs|attach|shell|forward RUN` find a run by its id, a unique start of it, or the
short id the console's id column shows (the random part that ends it): a user copies the
id they see, and before, only the start of the full id worked."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine.report.views import RunView
from engine.state.store import Store
from tui.widgets.jobs_table import short_id

AT = datetime(2026, 12, 4, 6, 0, tzinfo=UTC)
IDS = ("20261204-061502-6e80cbe3", "20261204-061502-6e80aaaa", "20261204-071000-0b0b0b0b")


def view(run_id: str) -> RunView:
    return RunView(
        run_id=run_id, job_name="job", pool="p", state="RUNNING", phase="run",
        created=AT, updated=AT, run_dir=Path("/runs") / run_id,
    )  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "runs.sqlite")
    for run_id in IDS:
        opened.save(view(run_id))
    yield opened
    opened.close()


def found(store: Store, ref: str) -> str | None:
    view = store.find(ref)
    return view.run_id if view is not None else None


def test_the_short_id_the_console_shows_finds_its_run(store: Store) -> None:
    assert short_id(IDS[0]) == "6e80cbe3"
    assert found(store, short_id(IDS[0])) == IDS[0]
    assert found(store, short_id(IDS[2])) == IDS[2]


def test_the_whole_id_and_a_unique_start_still_find_it(store: Store) -> None:
    assert found(store, IDS[1]) == IDS[1]
    assert found(store, "20261204-07") == IDS[2]


def test_a_reference_that_matches_several_runs_or_none_finds_nothing(store: Store) -> None:
    assert found(store, "20261204-061502") is None  # the start of two ids
    assert found(store, "cbe3") is None  # not the whole random part: no guessing
    assert found(store, "nosuch") is None
    assert found(store, "") is None
