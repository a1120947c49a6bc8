"""The board at k9s density, on twelve recorded runs (no run is the subject): ten run
rows at 80×24 with the preview open, the pools and the preview collapsed with one key
each and remembered, a wide terminal's columns, and on each row why its run ended, in a
colour of its state, with its cost beside its cap."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from engine.engine import Engine
from tests.tui.conftest import (
    FIXED_NOW,
    booted,
    fixed_clock,
    many_runs,
    screen_rows,
    until,
    with_history,
)
from tui.app import SwjobApp
from tui.widgets.jobs_table import JobsTable, cost_text, ellipsis, middle_cut

DATA = Path(__file__).parent / "data" / "runs"
WHYS = ("lost", "stopped", "cap", "setup 1", "exit 3", "exit 0")


@pytest.fixture
def twelve(engine: Engine, tmp_path: Path) -> Engine:
    return with_history(engine, many_runs(DATA, tmp_path / "recorded", 12))


def run_rows(app: SwjobApp) -> list[str]:
    return [row for row in screen_rows(app) if row.startswith(("│ sweep", "│ job-"))]


async def test_at_80x24_ten_runs_show_beside_the_preview_and_panes_fold_away(twelve) -> None:
    app = SwjobApp(twelve, clock=fixed_clock)
    async with app.run_test(size=(80, 24)) as pilot:
        await booted(pilot)
        await until(pilot, lambda: app.screen.query_one(JobsTable).row_count == 12)
        await until(pilot, lambda: app.screen.query_one("#run-preview").display)
        assert len(run_rows(app)) >= 10
        rows = run_rows(app)
        for row, why in zip(rows, WHYS, strict=False):
            assert f" {why} " in row, row  # the reason on the row itself
        assert any("…" in row for row in rows)  # a cut name says it is cut
        await pilot.press("P", "v")  # pools and preview folded: every run fits
        await until(pilot, lambda: len(run_rows(app)) == 12)
        assert not app.screen.query_one("#pools").display
    # the next session (a new engine, as a new console's: the first one's closes with its
    # app, and may still be closing) remembers
    again = SwjobApp(Engine(twelve.config), clock=fixed_clock)
    async with again.run_test(size=(80, 24)) as pilot:
        await booted(pilot)
        assert not again.screen.query_one("#pools").display
        assert not again.screen.query_one("#run-preview").display
        await pilot.press("P", "v")
        assert again.screen.query_one("#pools").display


async def test_a_wide_terminal_shows_pool_attempts_and_the_whole_reason(twelve) -> None:
    app = SwjobApp(twelve, clock=fixed_clock)
    async with app.run_test(size=(200, 50)) as pilot:
        await booted(pilot)
        await until(pilot, lambda: app.screen.query_one(JobsTable).row_count == 12)
        head = next(row for row in screen_rows(app) if " run id " in row)
        for label in ("pool", "try", "gpu%", "$/h", "reason"):
            assert f" {label} " in head
        assert any("stopped by operator" in row for row in screen_rows(app))
        assert any("sweep-lr-3e-4-batch-512-seed-11 " in row for row in screen_rows(app))


def test_the_row_colours_its_reason_and_the_cost_turns_at_80_percent_of_its_cap() -> None:
    from tui.widgets.jobs_table import why_text

    assert str(cost_text(0.006, 0.01)) == "$0.006/0.01"
    assert cost_text(0.0079, 0.01).style == "" and "yellow" in str(cost_text(0.008, 0.01).style)
    assert cost_text(0.5, None) == "$0.500"
    from engine.api import cost_split

    split = cost_split({"run": 0.00042, "setup": 0.000042}, ["setup", "run"])
    assert split == "setup $0.000042 · run $0.00042"  # not $0.000 for every part
    assert ellipsis("sweep-lr-3e-4", 8) == "sweep-l…" and ellipsis("job", 8) == "job"
    # a cut name keeps both ends: sweep variants differ at theirs
    assert middle_cut("train[lr=0.1]", 9) == "trai…0.1]" != middle_cut("train[lr=0.01]", 9)
    assert middle_cut("job", 8) == "job"
    from engine.api import RunView

    base = RunView(run_id="r", job_name="j", pool="local", state="FAILED", phase="done",
                   created=FIXED_NOW - timedelta(minutes=1), updated=FIXED_NOW,
                   run_dir=Path("/nowhere"))  # fmt: skip
    failed = base.model_copy(update={"reason": "run exited with code 3", "exit_code": 3})
    assert str(why_text(failed)) == "exit 3" and why_text(failed).style == "red"
    done = base.model_copy(update={"state": "COMPLETED", "exit_code": 0, "phase": "teardown"})
    assert str(why_text(done)) == "exit 0" and why_text(done).style == "green"
