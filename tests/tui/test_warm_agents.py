"""The console warms its local agents: a run submitted from it is driven by an agent its
engine's fork server forked (its imports done before the submit), and no agent is left
when the console quits."""

from __future__ import annotations

import os
from pathlib import Path

from engine.engine import Engine
from engine.providers.local import FORKED
from tests.support.engines import engine_config
from tests.support.leftovers import processes_under
from tests.support.processes import fork_servers, node_dirs, pid_alive
from tests.support.runs import agent_pid, events
from tests.tui.conftest import REPO, SIZE, booted, finished, until
from tui.app import SwjobApp


async def test_a_run_submitted_from_the_console_is_driven_by_a_forked_agent(
    tmp_path: Path,
) -> None:
    engine = Engine(engine_config(tmp_path / "runs", warm_agents=True))
    app = SwjobApp(engine, cwd=REPO)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await until(pilot, lambda: len(fork_servers(os.getpid())) == 1)
        await pilot.press("n", *"examples/hello/job.toml")
        await pilot.press("enter")
        await until(pilot, engine.runs)
        view = await finished(app, engine.runs()[0].run_id)
        assert view.state == "COMPLETED"
        created = [e for e in events(Path(view.run_dir)) if e.kind == "boot"][1]
        assert created.phase == "instance_created" and created.detail.endswith(FORKED)
        agent = agent_pid(Path(view.run_dir))
        await pilot.press("q")
    assert not pid_alive(agent)
    assert node_dirs() == [] and processes_under(tmp_path) == []
