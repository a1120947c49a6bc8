"""The run index (runs.sqlite) is committed by the writer thread, never on the event loop:
a commit waits for the disk (or for another swjob holding the index), and everything on
the loop — keys, heartbeats, transfers — would wait with it. Its rows still come after
the events they summarise, and a run acts on the world only once they are in."""

from __future__ import annotations

import asyncio
import sqlite3
import time

from engine.state import ownership
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


async def test_a_run_gives_up_its_lease_only_once_its_end_is_indexed(
    engine, make_job, monkeypatch
) -> None:
    """Another swjob takes a run whose lease is free and whose index row is unfinished as
    abandoned, and adopts it: were the lease given up before the end's row is committed,
    a finished run would be adopted and its verdict overwritten. The end's commit is made
    slow here, so the window would be wide open."""
    writes = engine._writes
    save = writes.save

    def slow_end(view, *args, **kwargs) -> None:
        if view.finished is not None:
            time.sleep(0.5)  # on the writer thread: the loop goes on meanwhile
        save(view, *args, **kwargs)

    monkeypatch.setattr(writes, "save", slow_end)
    run_id = await engine.submit(make_job(run="echo indexed"), "local")
    reader = Store()
    free_but_unfinished = []
    async with asyncio.timeout(60):
        while reader.unfinished_run(run_id) is not None or engine.running_run(run_id):
            lease = ownership.acquire(run_id)
            if lease is not None:  # what an adopter would see now
                free_but_unfinished.append(reader.unfinished_run(run_id) is not None)
                lease.release(finished=True)
            await asyncio.sleep(0.01)
    reader.close()
    assert True not in free_but_unfinished, "the lease was free before the end was indexed"
    assert (await engine.wait(run_id)).state == "COMPLETED"
