"""A local node's big workspace is removed off the event loop: with 8,000 files (900 MB)
the console froze 15–17 s while a synchronous tree removal ran on its loop at teardown
(keys, clocks and every other run's log held up behind it)."""

from __future__ import annotations

import asyncio

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
