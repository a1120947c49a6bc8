"""The board's sweep group (tui/widgets/sweep_group.py) through Pilot, on a real engine
running a real sweep: its row counts running and queued runs, shows cost against the cap,
collapses, and `s` stops the whole group — running runs stopped, queued ones held; the
board mounts one, collapsed, per sweep with runs it knows."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.app import App, ComposeResult
from textual.widgets import DataTable

from engine.api import Engine, Sweep, expand, load_job
from tests.support.engines import EngineFactory
from tests.support.runs import waiting_job
from tests.support.waiting import eventually_async
from tests.tui.conftest import SIZE, booted
from tui.app import SwjobApp
from tui.widgets.sweep_group import SweepGroup


class GroupApp(App[None]):
    def __init__(self, engine: Engine, sweep_id: str) -> None:
        super().__init__()
        self.engine, self.sweep_id = engine, sweep_id

    def compose(self) -> ComposeResult:
        yield SweepGroup(self.engine, self.sweep_id)


async def test_the_group_row_counts_its_runs_and_s_stops_the_group(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    engine = await make_engine()
    job = load_job(waiting_job(tmp_path / "p", "grid", tmp_path / "never"))
    sweep = Sweep(engine, job, expand({"LR": ["0.1", "0.2", "0.3"]}), concurrency=2,
                  max_dollars=5.0, tick_s=0.1)  # fmt: skip
    running = asyncio.create_task(sweep.run())
    app = GroupApp(engine, sweep.sweep_id)
    async with app.run_test(size=(150, 20)) as pilot:
        group = app.query_one(SweepGroup)

        def title_says(text: str) -> bool:
            return text in str(group.title)

        await eventually_async(
            lambda: title_says("0 done · 2 running · 1 queued · 0 failed · $0.000 / $5.00"),
            30, "two runs running, one queued", pause=pilot.pause,
        )  # fmt: skip
        table = group.query_one(DataTable)
        assert table.row_count == 2
        table.focus()
        await pilot.press("s")
        rows = await asyncio.wait_for(running, 60)
        await eventually_async(
            lambda: title_says("0 done · 0 running · 1 held · 2 failed"), 30, "the group stopped",
            pause=pilot.pause,
        )  # fmt: skip
        assert "halted: stopped by operator (swjob stop --sweep)" in str(group.title)
        group.query_one("CollapsibleTitle").focus()
        await pilot.press("enter")
        assert group.collapsed
    assert [row.state for row in rows] == ["FAILED", "FAILED", "NOT STARTED"]


async def test_the_board_shows_a_collapsed_group_row_for_each_sweep(
    engine: Engine, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    job = load_job(waiting_job(tmp_path / "p", "grid", release))
    app = SwjobApp(engine)  # starts the engine, and closes it on unmount
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        sweep = Sweep(engine, job, expand({"LR": ["0.1", "0.2"]}), concurrency=2, tick_s=0.1)
        running = asyncio.create_task(sweep.run())
        await eventually_async(
            lambda: app.screen.query(SweepGroup), 30, "a group row", pause=pilot.pause
        )
        group = app.screen.query_one(SweepGroup)
        assert group.sweep_id == sweep.sweep_id and group.collapsed
        release.touch()
        rows = await asyncio.wait_for(running, 60)
    assert [row.state for row in rows] == ["COMPLETED", "COMPLETED"]
