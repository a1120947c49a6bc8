"""The run index (runs.sqlite) is committed by the writer thread, never on the event loop:
a commit waits for the disk (or for another swjob holding the index), and everything on
the loop — keys, heartbeats, transfers — would wait with it. Its rows still come after
the events they summarise, and a run acts on the world only once they are in."""

from __future__ import annotations

import asyncio
import sqlite3

from engine.state.store import Store


async def test_a_locked_index_never_holds_up_the_loop_and_the_run_goes_on_once_free(
    engine, make_job
) -> None:
    holder = sqlite3.connect(Store().path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the index
    try:
        run_id = await engine.submit(make_job(run="echo indexed"), "local")  # indexes it
        for _ in range(20):
            await asyncio.sleep(0.01)  # the loop turns while the index is held
        view = engine.run(run_id)
        assert view is not None and view.phase == "new", "it acted before it was indexed"
        assert Store().find(run_id) is None
    finally:
        holder.rollback()
        holder.close()
    async with asyncio.timeout(60):
        view = await engine.wait(run_id)
    assert view.state == "COMPLETED"
    indexed = Store().find(run_id)
    assert indexed is not None and indexed.state == "COMPLETED"
