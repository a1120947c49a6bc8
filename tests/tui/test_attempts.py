"""A job that took two attempts, in the console, against a real engine (real agents on
the local pool): the board shows it as one row — the latest attempt's, `2/2` — and the job
detail lists its attempts, `[` / `]` opening the one before or after. What a row costs (all
its job's attempts) is priced on rented nodes: tests/tui/test_pure.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from engine.engine import Engine
from tests.support.engines import engine_config
from tests.support.jobs import RESUMING
from tests.tui.conftest import booted, finished, screen_text, until
from tui.app import SwjobApp
from tui.screens.detail import DetailScreen
from tui.widgets.jobs_table import JobsTable

pytestmark = pytest.mark.timeout(90)
CHAIN = {"node_lost_after_s": 2.0, "sync_every_s": 0.3, "max_attempts": 2}


async def test_a_job_retried_is_one_row_and_its_detail_lists_both_attempts(
    tmp_path: Path, make_job
) -> None:
    engine = Engine(engine_config(tmp_path / "runs", local=CHAIN))
    job = make_job(name="resumer", run=RESUMING, outputs=["ck/", "result.txt"])
    app = SwjobApp(engine, jobs=[job])
    async with app.run_test(size=(130, 40)) as pilot:
        await booted(pilot)
        [first] = engine.runs()
        await until(pilot, lambda: (first.run_dir / "outputs/ck/last.txt").exists())
        node = engine.run(first.run_id).node
        os.kill(int(node.offer["pid"]), signal.SIGKILL)
        lost = await finished(app, first.run_id)
        second = engine.successor(first.run_id)
        assert second is not None, lost.reason
        done = await finished(app, second)
        assert done.state == "COMPLETED", done.reason
        table = app.screen.query_one(JobsTable)
        await until(pilot, lambda: table.row_count == 1 and table.selected == second)
        await until(pilot, lambda: "done 2/2" in screen_text(app))

        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        listed = str(app.screen.query_one("#attempts").render())
        assert f"attempt 1/2  {first.run_id}" in listed and "node lost" in listed
        assert f"▸ attempt 2/2  {second}" in listed and "2 attempts" in listed
        await pilot.press("right_square_bracket")  # there is none after the latest
        assert app.screen.run_id == second
        await pilot.press("left_square_bracket")
        await until(pilot, lambda: getattr(app.screen, "run_id", None) == first.run_id)
        await until(pilot, lambda: f"▸ attempt 1/2  {first.run_id}" in screen_text(app))
        await pilot.press("right_square_bracket")
        await until(pilot, lambda: getattr(app.screen, "run_id", None) == second)
        await pilot.press("question_mark")  # the keys are in the help, with what they do
        await until(pilot, lambda: "Previous attempt" in screen_text(app))
        assert "Next attempt" in screen_text(app)
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        await pilot.press("escape")
        await until(pilot, lambda: app.screen.query(JobsTable))
