"""A hostile outputs glob over a huge tree: the node keeps heartbeating while
it matches 100k names, so the run is not declared lost, and it ends COMPLETED with the one
name that does match collected. Real agent, real iroh, real files."""

from __future__ import annotations

import asyncio
import time

import pytest

from engine.report import events as ev
from tests.support.engines import engine_with
from tests.support.tap import Tap

pytestmark = [pytest.mark.timeout(120)]

HOSTILE = "many/*a*a*a*a*a*a*a*a*a*a*a*a*a*ab"
FILES = 100_000
MAKE = (
    "python3 -c \"import os; os.mkdir('many'); "
    f"[open('many/' + 'a' * 200 + str(i), 'w').close() for i in range({FILES})]; "
    "open('many/' + 'a' * 30 + 'b', 'w').close()\""
)


async def test_hostile_glob_over_100k_files_keeps_the_node_alive(
    tmp_path, make_job, record_fault
) -> None:
    job = make_job(run=MAKE, outputs=[HOSTILE])
    # a node silent for 2 s is lost: matching must never hold the agent's loop that long
    async with engine_with(tmp_path / "runs", deadline_s=2.0, heartbeat_s=0.25) as engine:
        tap = Tap(engine)
        try:
            run_id = await engine.submit(job, "local")
            collecting, _ = await tap.until(
                lambda e: (
                    isinstance(e, ev.Transition)
                    and e.run_id == run_id
                    and e.to_phase == "collecting"
                ),
                timeout=90,
            )
            view = await asyncio.wait_for(engine.wait(run_id), 90)
            listed_s = time.monotonic() - collecting
            tap.drain()
            causes = [e.cause for e in tap.events(run_id) if isinstance(e, ev.Transition)]
        finally:
            tap.close()
    assert "NodeLost" not in causes, causes
    assert view.state == "COMPLETED", view
    landed = list((view.run_dir / "outputs" / "many").iterdir())
    assert [p.name for p in landed] == ["a" * 30 + "b"]  # positive control: matching works
    record_fault(
        f"outputs glob `*a*a…ab` over {FILES // 1000}k files",
        None,
        "COMPLETED, no NodeLost",
        f"nothing (collection {listed_s:.1f} s)",
    )
