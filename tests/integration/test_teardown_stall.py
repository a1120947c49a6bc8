"""A local node's big workspace is removed off the event loop: with 8,000 files (900 MB)
the console froze 15–17 s while a synchronous tree removal ran on its loop at teardown
(keys, clocks and every other run's log held up behind it). And runs submitted at once
start one per turn of the loop."""

from __future__ import annotations

import asyncio

from engine.core.runs import RunTable
from engine.engine import Engine
from tests.support.processes import node_dirs
from tests.support.stalls import watched_loop
from tests.support.waiting import eventually_async

MAKE = (
    "import os\n"
    "for d in range(500):\n"
    "    os.makedirs(f'tree/{d}')\n"
    "    for f in range(10):\n"
    "        open(f'tree/{d}/{f}', 'w').write('x')\n"
    "print('made', flush=True)\n"
)


async def test_a_big_workspace_is_removed_without_stalling_the_loop(make_engine, make_job):
    engine: Engine = await make_engine()
    job = make_job({"make.py": MAKE}, run="python3 make.py", workspace={"workdir": "."})
    run_id = await engine.submit(job, "local")
    async with watched_loop() as stalls:
        view = await asyncio.wait_for(engine.wait(run_id), 120)
        await eventually_async(lambda: not node_dirs(), 60, what="the node's directory gone")
    assert view.state == "COMPLETED", view.reason
    # removed on the loop, these 500 directories of 10 files held its thread on a CPU for
    # ~70 ms at once (seconds of wall time on a loaded machine); off it, ~1 ms between turns
    assert stalls.busiest_s < 0.025, f"the loop ran {stalls.busiest_s:.3f} s without a turn"


async def test_runs_submitted_at_once_start_one_per_turn_of_the_loop(
    engine, make_job, monkeypatch
) -> None:
    """Twelve submits gathered at once (a sweep, a script) started their twelve runs in
    one turn of the loop, ~20 ms of the console's on a busy machine: each start now
    waits for a turn of its own."""
    turns = 0

    async def turning() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    started_in: list[int] = []
    start = RunTable.start

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        started_in.append(turns)
        return start(self, *args, **kwargs)

    monkeypatch.setattr(RunTable, "start", counted)
    job = make_job({}, run="true")
    counter = asyncio.create_task(turning())
    try:
        ids = await asyncio.gather(*(engine.submit(job, "local") for _ in range(3)))
    finally:
        counter.cancel()
    assert len(set(started_in)) == 3, started_in
    for run_id in ids:
        view = await asyncio.wait_for(engine.wait(run_id), 120)
        assert view.state == "COMPLETED", view.reason
