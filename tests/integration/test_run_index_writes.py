"""The run index (runs.sqlite) is committed by the writer thread, never on the event loop:
a commit waits for the disk (or for another swjob holding the index), and everything on
the loop — keys, heartbeats, transfers — would wait with it. Its rows still come after
the events they summarise, and a run acts on the world only once they are in."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time

import pytest

from engine.engine import Engine
from engine.report.datastream import read_events
from engine.run import abandon, orchestrator
from engine.run.runrecord import write_summary
from engine.state import ownership
from engine.state.locked import StateNotWritten
from engine.state.paths import state_dir
from engine.state.store import WRITE_WAIT_S, Store
from tests.support.engines import engine_config
from tests.support.runs import unfinished_run
from tests.support.sqlitelock import locked
from tests.support.stalls import watched_loop


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


async def test_run_json_is_written_by_the_writer_thread_behind_the_runs_events(
    engine, make_job, monkeypatch
) -> None:
    """Like every file the engine writes as a run goes: the disk may be slow, and the
    engine calls the run over only once it is on the file."""
    writers = []

    def spied(run_dir, summary):
        writers.append(threading.current_thread().name)
        return write_summary(run_dir, summary)

    monkeypatch.setattr(orchestrator, "write_summary", spied)
    run_id = await engine.submit(make_job(run="echo indexed"), "local")
    async with asyncio.timeout(60):
        view = await engine.wait(run_id)
    assert writers == ["swjob-append"]
    assert json.loads((view.run_dir / "run.json").read_text())["state"] == "COMPLETED"


async def test_gc_ends_an_abandoned_run_off_the_loop_while_the_index_is_held(tmp_path) -> None:
    """Its end goes to events.jsonl, the index and run.json on the writer thread: with
    runs.sqlite held by another process the loop goes on, and what was not written is said."""
    run_dir = unfinished_run(tmp_path / "runs", "r1")
    store = Store()
    claims = abandon.Claims(store)
    assert claims.take("r1")
    with locked(store.path):
        async with watched_loop() as stalls:
            said = await claims.settle("r1")
    assert stalls.longest_s < WRITE_WAIT_S / 2, f"the loop stalled {stalls.longest_s:.2f} s"
    assert (
        said
        == f"run r1 not marked FAILED in the run index: {store.path} is locked by another process"
    )
    assert json.loads((run_dir / "run.json").read_text())["reason"] == abandon.REASON
    assert [type(e).__name__ for e in read_events(run_dir / "events.jsonl")][-1] == "Finished"
    store.close()


async def test_an_index_held_before_it_is_in_wal_mode_fails_the_start_off_the_loop(
    tmp_path,
) -> None:
    """Only an index not yet in WAL mode makes a read or an open wait for another
    process's lock (swjob puts it in WAL mode when it opens it): the start waits off the
    loop, a bounded time, and fails naming the file."""
    path = state_dir() / "runs.sqlite"
    engine = Engine(engine_config(tmp_path / "runs"))
    with locked(path):  # made by the holder, in sqlite's default rollback-journal mode
        async with watched_loop() as stalls:
            with pytest.raises(StateNotWritten, match=f"{path} is locked by another process"):
                await engine.start()
    assert stalls.longest_s < WRITE_WAIT_S / 2, f"the loop stalled {stalls.longest_s:.2f} s"
