"""The console on a full landing disk: the job detail says what `swjob run` says."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from tests.support.disks import tmpfs
from tests.tui.conftest import booted, finished, screen_text, until
from tui.app import SwjobApp
from tui.screens.detail import DetailScreen


async def test_the_detail_of_a_job_whose_outputs_could_not_land_says_why(
    engine, make_job, tmp_path: Path
) -> None:
    """Exit 0 on a landing disk that is full: COMPLETED, and the detail names where the
    outputs could not land (it was "FAILED: internal error: OSError: [Errno 28] …")."""
    job = make_job(name="full", run="echo hi > out.txt", outputs=["out.txt"])
    with tmpfs(engine.config.runs_dir, "1m") as disk:
        disk.fill()
        app = SwjobApp(engine, jobs=[job])
        try:
            async with app.run_test(size=(130, 40)) as pilot:
                await booted(pilot)
                [run] = engine.runs()
                view = await finished(app, run.run_id)
                assert (view.state, view.exit_code) == ("COMPLETED", 0), view.reason
                await pilot.press("enter")
                await until(pilot, lambda: isinstance(app.screen, DetailScreen))
                why = f"outputs not collected: cannot write {run.run_dir}/manifest.json"
                header = app.screen.query_one("#summary", Static)
                await until(pilot, lambda: why in str(header.render()))
                assert f"{why}: No space left on device" in str(header.render())
                assert "internal error" not in screen_text(app)
        finally:
            disk.free_up()
