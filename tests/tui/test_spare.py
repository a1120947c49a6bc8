"""The console keeps one standby agent for its next local run: the run is driven by that
very process, a new one replaces it, and none is left when the console quits."""

from __future__ import annotations

from pathlib import Path

from engine.engine import Engine
from tests.support.engines import engine_config
from tests.support.processes import node_dirs, pid_alive, standby_agents
from tests.support.runs import agent_pid
from tests.tui.conftest import REPO, SIZE, booted, finished, until
from tui.app import SwjobApp


async def test_a_run_submitted_from_the_console_is_driven_by_its_spare_agent(
    tmp_path: Path,
) -> None:
    engine = Engine(engine_config(tmp_path / "runs", keep_spare=True))
    app = SwjobApp(engine, cwd=REPO)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await until(pilot, lambda: len(standby_agents()) == 1)
        [spare] = standby_agents()
        await pilot.press("n", *"examples/hello/job.toml")
        await pilot.press("enter")
        await until(pilot, engine.runs)
        view = await finished(app, engine.runs()[0].run_id)
        assert view.state == "COMPLETED"
        assert agent_pid(Path(view.run_dir)) == spare
        await until(pilot, lambda: len(standby_agents()) == 1 and standby_agents() != [spare])
        [replacement] = standby_agents()
        await pilot.press("q")
    assert not pid_alive(replacement)
    assert node_dirs() == []
