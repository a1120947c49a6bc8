"""The console and a run whose outputs are only in its sink (a real SeaweedFS S3 server):
the outputs browser says where they are, and `d` lands them here, verified, and shows them."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.engine import Engine
from tests.support.engines import engine_config
from tests.support.s3 import Bucket
from tests.tui.conftest import SIZE, booted, finished, screen_text, until
from tui.app import SwjobApp
from tui.screens.outputs import OutputsScreen


async def test_a_run_whose_outputs_are_only_in_the_sink_is_browsed_after_d(
    tmp_path: Path, make_job, s3: Bucket
) -> None:
    sink = {"sink": s3.url, "sink_endpoint": s3.server.endpoint}
    engine = Engine(engine_config(tmp_path / "runs", local=sink))
    job = make_job(run="echo 42 > answer.txt", outputs=["answer.txt"], name="answer")
    app = SwjobApp(engine, jobs=[job])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run = await finished(app, engine.runs()[0].run_id)
        assert run.state == "COMPLETED", run.reason
        shutil.rmtree(run.run_dir / "outputs")  # the laptop's copy is gone
        await pilot.press("o")
        screen = app.screen
        assert isinstance(screen, OutputsScreen)
        await until(pilot, lambda: "outputs in the sink only" in screen_text(app))
        await pilot.press("d")
        await until(pilot, lambda: screen.path is not None and screen.path.name == "answer.txt")
        assert (run.run_dir / "outputs/answer.txt").read_text() == "42\n"
        await until(pilot, lambda: "outputs also in the sink" in screen_text(app))
