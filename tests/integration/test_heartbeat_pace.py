"""A pool may say a silent node is lost sooner than the engine's usual heartbeat: the
heartbeats of its runs keep pace, so a healthy node is never taken for lost."""

from __future__ import annotations

from pathlib import Path

from tests.support.engines import engine_with


async def test_a_deadline_shorter_than_the_heartbeat_loses_no_healthy_node(
    tmp_path: Path, make_job
) -> None:
    job = make_job(run="sleep 3 && echo done")
    async with engine_with(tmp_path / "runs", deadline_s=0.8, heartbeat_s=1.0) as engine:
        view = await engine.wait(await engine.submit(job, "local"))
    assert (view.state, view.exit_code, view.reason) == ("COMPLETED", 0, None), view.reason
