"""The run index (runs.sqlite) cannot be written while runs go on and end.

Another process holds its write lock for as long as it likes: `swjob runs` or a second
console mid-write, a backup tool, a user's sqlite3 shell with `BEGIN EXCLUSIVE;` left
open. Waiting for it for good froze every run (the index's writer thread is the one every
events.jsonl line goes through) and quitting with them. A write waits a bounded time, then
the run goes on, the failure is said once as one line naming the file, the row is kept and
written once the lock is free; what is still unwritten at exit is said and kept beside
the index (engine/state/spill.py), and the next swjob to open the index writes it in.

The state dir's disk is full: the index write fails, and the run must still end (its
node torn down, `swjob run` exiting) with the failure said. A failed write raised inside
the run's driver left it driverless mid-teardown: its node up, `swjob run` waiting forever.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import engine.core.adoption as adoption_module
from engine.jobs.jobspec import load_job
from engine.providers.vast_boot import label_for
from engine.report import events as ev
from engine.report.runbook import new_view
from engine.state import ownership, spill
from engine.state.paths import state_dir
from engine.state.store import Store
from tests.standin.server import StandIn
from tests.support.cli import Cli, swjob
from tests.support.disks import tmpfs
from tests.support.engines import EngineFactory
from tests.support.processes import pid_alive
from tests.support.runs import (
    agent_pid,
    finished,
    only_run_dir,
    run_json,
    unfinished_run,
    waiting_job,
)  # fmt: skip
from tests.support.sqlitelock import locked
from tests.support.tap import Tap
from tests.support.vast import POOLS_FILE
from tests.support.waiting import eventually

NOT_WRITTEN = "run index not written"


def _running(tmp_path: Path, clis: Callable[..., Cli]) -> tuple[Cli, Path, int]:
    """A real `swjob run` of a job that ends once `tmp_path/release` exists, once its job
    is running: the process, its run dir and its local agent's pid."""
    job = waiting_job(tmp_path / "job", "indexed", tmp_path / "release")
    cli = clis("run", str(job), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    run_dir = only_run_dir(tmp_path / "runs", "indexed")
    eventually(lambda: cli.has_printed("run | line 3"), 60, "the job running")
    return cli, run_dir, agent_pid(run_dir)


def _ended_with_node_gone(cli: Cli, run_dir: Path, agent: int) -> None:
    assert cli.wait(60) == 0, cli.output()
    assert not pid_alive(agent)
    assert (run_dir / "outputs" / "out.txt").read_text() == "done\n"


async def test_a_run_ends_and_swjob_run_exits_while_another_process_holds_the_index(
    tmp_path: Path, clis: Callable[..., Cli], record_fault: Callable[..., None]
) -> None:
    cli, run_dir, agent = _running(tmp_path, clis)
    index = state_dir() / "runs.sqlite"
    with locked(index):
        (tmp_path / "release").touch()  # the job ends: its end's index rows meet the lock
        _ended_with_node_gone(cli, run_dir, agent)
        said = [line for line in cli.output().splitlines() if NOT_WRITTEN in line]
        assert any(f"{index} is locked by another process" in line for line in said), said
        at_exit = [line for line in said if "at exit" in line]  # logged: one `swjob:` line
        assert len(at_exit) == 1 and at_exit[0].startswith(f"swjob: {NOT_WRITTEN} at exit"), said
        assert run_dir.name in at_exit[0], said
    kept = index.parent / "unindexed" / f"{run_dir.name}.json"
    assert kept.exists(), "its end is kept beside the index"
    store = Store()  # the next process to open the index writes it in
    try:
        view = store.find(run_dir.name)
        assert store.unfinished() == []
    finally:
        store.close()
    assert view is not None and view.finished is not None and view.state == "COMPLETED"
    assert not kept.exists()
    assert not (state_dir() / "leases" / f"{run_dir.name}.lock").exists()  # as at its end
    record_fault("runs.sqlite write-locked by another process as a run ends", None,
                 "run ends COMPLETED, node torn down, exits; lock said, unwritten end said",
                 "its index row, kept beside the index until the next swjob opens it")  # fmt: skip


async def test_index_failure_is_said_again_after_the_index_recovered(
    make_engine: EngineFactory, make_job: Callable[..., object]
) -> None:
    engine = await make_engine()
    index = state_dir() / "runs.sqlite"

    def said(text: str) -> Callable[[ev.Event], bool]:
        return lambda e: isinstance(e, ev.Alert) and e.run_id == "" and text in e.message

    for turn in (1, 2):
        tap = Tap(engine)
        with locked(index):
            run_id = await engine.submit(make_job(name=f"turn{turn}", run="true"), "local")
            async with asyncio.timeout(30):
                view = await engine.wait(run_id)  # never waits for good on the lock
            assert view.state == "COMPLETED", view.reason
            await tap.until(said(f"{index} is locked by another process"), 10)
        await tap.until(said("run index written again"), 10)
        tap.close()
        indexed = Store().find(run_id)
        assert indexed is not None and indexed.state == "COMPLETED"


async def test_the_adoption_scan_never_says_the_index_is_written_while_it_is_held(
    make_engine: EngineFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console's adoption scan writes kept rows in, on the writer thread as every
    index write. Finding none to write, it counted as a write that succeeded: "run index
    written again" was said at every scan (5 s) while the lock was still held, and the
    retries of the rows kept meanwhile stopped until the next save failed again."""
    monkeypatch.setattr(adoption_module, "ADOPT_SCAN_S", 0.2)
    engine = await make_engine(adopt_orphans=True)
    index = state_dir() / "runs.sqlite"
    release = tmp_path / "release"
    tap = Tap(engine)

    def said(text: str) -> Callable[[ev.Event], bool]:
        return lambda e: isinstance(e, ev.Alert) and e.run_id == "" and text in e.message

    with locked(index):
        job = load_job(waiting_job(tmp_path / "p", "held", release))
        run_id = await engine.submit(job, "local")
        await tap.until(said(f"{index} is locked by another process"), 10)
        await asyncio.sleep(1.5)  # several scans, and the retries between them
        tap.drain()
        assert not [e for _, e in tap.seen if said("written again")(e)]
    await tap.until(said("run index written again"), 10)  # said once the lock is gone
    release.touch()
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason
    tap.close()


def test_a_run_ends_when_its_index_cannot_be_written(
    tmp_path: Path,
    clis: Callable[..., Cli],
    monkeypatch: pytest.MonkeyPatch,
    record_fault: Callable[..., None],
) -> None:
    with tmpfs(tmp_path / "state-disk", "2m") as disk:
        monkeypatch.setenv("SWJOB_STATE_DIR", str(disk.path))
        cli, run_dir, agent = _running(tmp_path, clis)
        disk.fill()
        (tmp_path / "release").touch()
        _ended_with_node_gone(cli, run_dir, agent)
        alert = next(line for line in cli.output().splitlines() if "run index not written" in line)
        assert "database or disk is full" in alert
        disk.free_up()
    record_fault("the state dir's disk full as a run ends", None,
                 "run ends COMPLETED, node torn down, alert said", "its index row")  # fmt: skip


def test_gc_collects_an_abandoned_run_while_another_process_holds_the_index(
    tmp_path: Path, api: StandIn, record_fault: Callable[..., None]
) -> None:
    """gc ends the abandoned run in its landing dir and says the index could not be told:
    waiting for the lock for good, it hung with the node destroyed and the run not ended."""
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS_FILE)
    run_dir = unfinished_run(tmp_path / "runs", "r1")  # its swjob died: nobody drives it
    rented = {"image": "img", "disk": 10, "env": {}, "onstart": None, "label": label_for("r1")}
    assert api.cloud.create(api.cloud.rentable()[0]["id"], rented) is not None
    index = state_dir() / "runs.sqlite"
    with locked(index):
        collected = swjob("gc", "--pools", str(pools), "--yes", cwd=tmp_path, timeout=30)
    out = collected.stdout
    assert api.cloud.instances == {} and len(api.cloud.destroyed) == 1, out
    assert f"run r1 not marked FAILED in the run index: {index} is locked" in out
    assert "collected 1 of 1" in out  # its node is gone: only a record of it is late
    assert run_json(run_dir)["reason"] == "abandoned: destroyed by gc"
    ended = finished(run_dir)
    assert ended is not None and ended.reason == "abandoned: destroyed by gc"
    record_fault("runs.sqlite write-locked by another process during `swjob gc`", None,
                 "node destroyed, run ended in its landing dir, index failure said",
                 "its index row")  # fmt: skip


def test_swjob_runs_lists_the_index_while_another_process_holds_it(tmp_path: Path) -> None:
    """A reader never waits on a writer's lock: swjob keeps its index in WAL mode."""
    unfinished_run(tmp_path / "runs", "r1", "listed", "local")
    with locked(state_dir() / "runs.sqlite"):
        listed = swjob("runs", cwd=tmp_path, timeout=10)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("r1\tlisted\tlocal\tPENDING")


def test_a_command_says_so_when_another_process_held_the_index_before_it_was_opened(
    tmp_path: Path,
) -> None:
    """Only an index not yet in WAL mode (made here by the holder) makes an open wait for
    the lock: a bounded wait, then one line naming the file, not a traceback."""
    index = state_dir() / "runs.sqlite"
    with locked(index):
        listed = swjob("runs", cwd=tmp_path, timeout=10)
    assert listed.returncode == 1
    assert listed.stderr == f"error: {index} is locked by another process\n"


def test_gc_leaves_the_nodes_of_runs_the_index_does_not_hold_yet(
    tmp_path: Path, api: StandIn
) -> None:
    """The index held: a `swjob run` whose first row never got in (r2), a console that
    adopted a run from its kept row (r3), a run left running whose row is only kept (r4).
    gc counted as owned only the index's unfinished runs, so it destroyed all three nodes
    as orphans, without a claim — two under their live owners' feet."""
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS_FILE)
    index = state_dir() / "runs.sqlite"
    Store().close()
    rows = {}
    for run_id in ("r3", "r4"):
        submitted = ev.Submitted(run_id=run_id, job_name="job", pool="gpu", run_dir=str(tmp_path))
        rows[run_id] = json.dumps({"view": new_view(submitted).model_dump(mode="json"),
                                   "recovery": None, "next": None})  # fmt: skip
    spill.keep(index, rows)
    owners = [ownership.acquire("r2"), ownership.acquire("r3")]  # alive: this process
    for run_id in ("r2", "r3", "r4"):
        rented = {"image": "img", "disk": 10, "env": {}, "onstart": None,
                  "label": label_for(run_id)}  # fmt: skip
        assert api.cloud.create(api.cloud.rentable()[0]["id"], rented) is not None
    try:
        with locked(index):
            collected = swjob("gc", "--pools", str(pools), "--yes", cwd=tmp_path, timeout=30)
    finally:
        for lease in owners:
            assert lease is not None
            lease.release()
    left = list(api.cloud.instances)
    for instance in left:  # their owners' to tear down: the test's, here
        api.cloud.destroy(instance)
    assert len(left) == 3 and api.cloud.destroyed == left, collected.stdout


async def test_a_console_starts_when_a_kept_runs_lease_cannot_be_taken(
    tmp_path: Path, make_engine: EngineFactory
) -> None:
    """A kept row whose run's lock file cannot be made (its disk full; here a file is in
    the way of the leases folder): the console's first adoption scan raised OSError out
    of Engine.start, and the console did not start at all."""
    submitted = ev.Submitted(run_id="r5", job_name="job", pool="local", run_dir=str(tmp_path))
    row = {"view": new_view(submitted).model_dump(mode="json"), "recovery": None, "next": None}
    Store().close()
    with locked(state_dir() / "runs.sqlite"):
        spill.keep(state_dir() / "runs.sqlite", {"r5": json.dumps(row)})
        assert not (state_dir() / "leases").exists()
        (state_dir() / "leases").write_text("in the way")
        console = await make_engine(adopt_orphans=True)
        assert not console.running_run("r5")
    (state_dir() / "leases").unlink()
