"""Live output sync on the local pool (real agents, real iroh on loopback): while `run` runs,
the declared outputs that changed land in the run's outputs/, verified; an unchanged output
is not pulled again; what the syncs held survives a node that dies before the final pull."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.engine import Engine, EngineConfig
from engine.jobs.pools import load_pools
from engine.report import events as ev
from engine.run.livesync import LiveSync
from tests.support.cli import Cli
from tests.support.engines import engine_with
from tests.support.runs import run_json
from tests.support.tap import Tap
from tests.support.waiting import eventually, eventually_async

pytestmark = pytest.mark.timeout(90)

Start = Callable[..., Cli]
EVERY_S = 0.3


def _blocks_until(flag: Path) -> str:
    return f"while [ ! -e {flag} ]; do sleep 0.05; done"


def _live(engine: Engine, run_id: str) -> LiveSync:
    return engine._drivers[run_id].transfers.live


def _synced(event: ev.Event, syncs: int) -> bool:
    return isinstance(event, ev.OutputsSynced) and event.syncs == syncs


async def test_changed_outputs_land_while_running_and_unchanged_ones_are_not_pulled(
    tmp_path: Path, make_job
) -> None:
    go, done = tmp_path / "go", tmp_path / "done"
    job = make_job(
        run=(
            f"mkdir -p ck && echo one > ck/last.txt && echo log > notes.txt && {_blocks_until(go)}"
            f" && echo two > ck/last.txt && {_blocks_until(done)}"
        ),
        outputs=["ck/", "notes.txt"],
    )
    async with engine_with(tmp_path / "runs", sync_every_s=EVERY_S) as engine:
        tap = Tap(engine)
        run_id = await engine.submit(job, "local")
        _, first = await tap.until(lambda e: _synced(e, 1))
        assert isinstance(first, ev.OutputsSynced)
        assert (first.files, sorted(first.paths), first.held) == (
            2,
            ["ck/last.txt", "notes.txt"],
            2,
        )
        view = engine.run(run_id)
        assert view is not None and view.phase == "run", "landed while the job still runs"
        landed = view.run_dir / "outputs/ck/last.txt"
        assert landed.read_text() == "one\n"
        inode, live = landed.stat().st_ino, _live(engine, run_id)
        checked = live.checks
        await eventually_async(lambda: live.checks >= checked + 5, what="five more syncs")
        tap.drain()
        assert [e for e in tap.events(run_id) if isinstance(e, ev.OutputsSynced)] == [first]
        assert landed.stat().st_ino == inode, "nothing changed: nothing was landed again"

        go.touch()
        _, second = await tap.until(lambda e: _synced(e, 2))
        assert isinstance(second, ev.OutputsSynced)
        assert (second.files, second.paths, second.held) == (1, ["ck/last.txt"], 2)
        assert landed.read_text() == "two\n"
        done.touch()
        view = await asyncio.wait_for(engine.wait(run_id), 30)
    assert view.state == "COMPLETED", view.reason
    assert view.last_sync == second
    last = run_json(view.run_dir)["last_sync"]
    assert last["at"] == second.ts.isoformat()
    assert (last["files"], last["paths"], last["held"], last["syncs"]) == (1, ["ck/last.txt"], 2, 2)
    assert (view.run_dir / "outputs/notes.txt").read_text() == "log\n"


async def test_what_the_syncs_held_survives_a_node_killed_before_the_final_pull(
    tmp_path: Path, make_job
) -> None:
    job = make_job(run="mkdir -p ck && echo step-7 > ck/last.txt && sleep 60", outputs=["ck/"])
    async with engine_with(tmp_path / "runs", deadline_s=2.0, sync_every_s=EVERY_S) as engine:
        tap = Tap(engine)
        run_id = await engine.submit(job, "local")
        await tap.until(lambda e: _synced(e, 1))
        view = engine.run(run_id)
        assert view is not None and view.node is not None
        killed = time.monotonic()
        os.kill(int(view.node.offer["pid"]), signal.SIGKILL)
        view = await asyncio.wait_for(engine.wait(run_id), 30)
        detected_s = time.monotonic() - killed
    assert view.state == "FAILED" and (view.reason or "").startswith("node lost"), view.reason
    assert detected_s < 10
    assert (view.run_dir / "outputs/ck/last.txt").read_text() == "step-7\n"
    assert run_json(view.run_dir)["last_sync"]["paths"] == ["ck/last.txt"]


@pytest.mark.parametrize(("settings", "syncs"), [({}, False), ({"sync_every_s": EVERY_S}, True)])
async def test_an_on_demand_pool_syncs_only_when_asked(
    tmp_path: Path, make_job, settings: dict, syncs: bool
) -> None:
    """Off by default on an on-demand pool: the run step starts no sync loop."""
    go = tmp_path / "go"
    job = make_job(run=f"echo started && {_blocks_until(go)}", outputs=["out.txt"])
    async with engine_with(tmp_path / "runs", **settings) as engine:
        tap = Tap(engine)
        run_id = await engine.submit(job, "local")
        # the step's first line arrives after the driver sent RunStep and started (or not)
        # the sync loop, in the same breath
        await tap.until(lambda e: isinstance(e, ev.Log) and e.lines[0].text == "started")
        assert _live(engine, run_id).running is syncs
        go.touch()
        view = await asyncio.wait_for(engine.wait(run_id), 30)
    assert view.state == "COMPLETED" and view.last_sync is None
    assert run_json(view.run_dir)["last_sync"] is None


async def test_syncing_goes_on_after_the_operator_restarts(tmp_path: Path, clis: Start) -> None:
    """`swjob run --sync-every` is killed -9 mid-run; the engine that adopts the run keeps
    syncing: a checkpoint the job writes after the restart lands before the job ends."""
    go, done = tmp_path / "go", tmp_path / "done"
    run = f"echo started && {_blocks_until(go)} && echo v2 > ck.txt && {_blocks_until(done)}"
    (tmp_path / "job.toml").write_text(
        f'[job]\nname = "resync"\nrun = "{run}"\noutputs = ["ck.txt"]\n'
    )
    cli = clis("run", "job.toml", "--sync-every", str(EVERY_S), cwd=tmp_path)
    runs = tmp_path / "swjob-runs" / "resync"
    eventually(lambda: any(runs.glob("*/logs/run.log")), what="the run log")
    [log] = runs.glob("*/logs/run.log")
    eventually(lambda: "started" in log.read_text(), what="the job started")
    cli.kill9()
    run_dir = log.parent.parent
    config = EngineConfig(runs_dir=runs.parent, pools=load_pools(None), adopt_orphans=True)
    engine = Engine(config)
    await engine.start()
    try:
        await eventually_async(lambda: engine.run(run_dir.name) is not None, what="the run adopted")
        go.touch()
        landed = run_dir / "outputs/ck.txt"
        await eventually_async(landed.exists, what="the checkpoint synced after the restart")
        view = engine.run(run_dir.name)
        assert view is not None and view.phase == "run" and landed.read_text() == "v2\n"
        done.touch()
        view = await asyncio.wait_for(engine.wait(run_dir.name), 60)
    finally:
        await engine.close()
    assert view.state == "COMPLETED", view.reason


def _tree(root: Path) -> dict[str, str]:
    """Every path under `root` and its kind (file contents for files)."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        found[rel] = "dir" if path.is_dir() else path.read_text()
    return found


async def test_outputs_that_change_type_or_go_follow_the_job_exactly(
    tmp_path: Path, make_job
) -> None:
    """A synced file later replaced by a directory ended an exit-0 job FAILED; a directory
    replaced by a file never landed; a deleted output stayed in outputs/, outside the
    manifest. Each sync and the final pull now land exactly what the job has."""
    step2, step3 = tmp_path / "step2", tmp_path / "step3"
    job = make_job(
        run=(
            "mkdir -p out/d && echo a1 > out/a && echo x > out/d/x && echo g > out/gone "
            "&& echo k > out/keep && "
            f"{_blocks_until(step2)} && rm out/a out/gone && mkdir out/a && echo i > out/a/i "
            f"&& rm -r out/d && echo d2 > out/d && {_blocks_until(step3)} && "
            "rm -r out/a && echo a3 > out/a && rm out/d && mkdir out/d && echo y > out/d/y "
            "&& rm out/keep"
        ),
        outputs=["out/"],
    )
    async with engine_with(tmp_path / "runs", sync_every_s=EVERY_S) as engine:
        tap = Tap(engine)
        run_id = await engine.submit(job, "local")
        await tap.until(lambda e: _synced(e, 1))
        landed = engine._drivers[run_id].view.run_dir / "outputs"
        step2.touch()  # a: file → dir, d: dir → file, gone: deleted; synced while running
        await tap.until(lambda e: _synced(e, 2))
        synced = {"out": "dir", "out/a": "dir", "out/a/i": "i\n", "out/d": "d2\n"}
        assert _tree(landed) == synced | {"out/keep": "k\n"}
        await _live(engine, run_id).stop()  # no sync sees what follows: the final pull does
        step3.touch()  # the same changes back, and keep deleted
        view = await asyncio.wait_for(engine.wait(run_id), 30)
        tap.close()
    assert view.state == "COMPLETED", view.reason
    final = {"out": "dir", "out/a": "a3\n", "out/d": "dir", "out/d/y": "y\n"}
    assert _tree(landed) == final
    manifest = json.loads((view.run_dir / "manifest.json").read_text())
    assert manifest["complete"] is True
    assert sorted(f["path"] for f in manifest["files"] if f["verified"]) == ["out/a", "out/d/y"]
    assert len(manifest["files"]) == 2
    assert sorted(manifest["removed_since_sync"]) == ["out/a", "out/d", "out/keep"]
