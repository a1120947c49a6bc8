"""Warm nodes with real agents on the local pool (docs/warm-nodes.md): the second run
takes the first run's node — same agent process, boot step "warm node reused" — and
finds a clean room (no file, env value or process of the first run); a released node
is gone; a node nobody claims releases itself when its keep time passes, with its
operator gone."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.api import WarmNodeView
from engine.cli.nodes import render
from engine.engine import Engine
from engine.jobs.jobspec import JobSpec
from engine.jobs.pools import Caps
from engine.providers.localspawn import node_root
from engine.report.events import BootPhase
from engine.run import warm
from engine.state.warmnodes import listing, view
from tests.support.cli import swjob
from tests.support.engines import EngineFactory, engine_with
from tests.support.processes import kill_quietly, pid_alive
from tests.support.runs import agent_pid, events, run_json, run_to_end
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(90)

SECRET = "warm-secret-6d1f"


def _boot_detail(run_dir: Path, phase: BootPhase) -> str | None:
    marks = [e for e in events(run_dir) if e.kind == "boot" and e.phase == phase]
    return marks[0].detail if marks else None


async def _release_all(engine: Engine) -> None:
    assert await engine.release_warm() == []
    assert engine.warm_nodes() == []


async def test_the_next_run_takes_the_warm_node_and_finds_a_clean_room(
    tmp_path: Path, make_engine: EngineFactory, make_job: Callable[..., JobSpec]
) -> None:
    engine = await make_engine(local={"keep_warm_s": 60})
    marker = f"warm-leftover-{tmp_path.name}"
    first = make_job(
        {"mine.txt": "first"},
        folder="first",
        run=f"echo $SECRET > leak.txt; sh -c 'sleep 300' {marker} & echo started",
        env={"SECRET": SECRET},
        workspace={"workdir": "."},
    )
    second = make_job(
        {"other.txt": "second"},
        folder="second",
        run=(
            "ls -A > listing.txt; ls -A .. > parent.txt; env > env.txt; "
            f"ps -eo args | grep -v grep | grep -c {marker} > procs.txt; true"
        ),
        outputs=["listing.txt", "parent.txt", "env.txt", "procs.txt"],
        workspace={"workdir": "."},
    )
    one = await run_to_end(engine, first)
    assert one.state == "COMPLETED", one.reason
    (warm,) = engine.warm_nodes()
    assert warm.pool == "local" and warm.in_use_by is None and warm.expires_in_s > 50

    two = await run_to_end(engine, second)
    assert two.state == "COMPLETED", two.reason
    assert agent_pid(two.run_dir) == agent_pid(one.run_dir)  # the same node, not a new one
    detail = _boot_detail(two.run_dir, BootPhase.WARM_REUSED)
    assert detail is not None and detail.startswith("idle ")
    outputs = two.run_dir / "outputs"
    assert sorted((outputs / "listing.txt").read_text().split()) == [
        "job.toml",
        "listing.txt",
        "other.txt",
    ]
    assert SECRET not in (outputs / "env.txt").read_text()
    assert "held" not in (outputs / "parent.txt").read_text().split()  # nor beside it
    assert (outputs / "procs.txt").read_text().strip() == "0"
    await _release_all(engine)
    pid = agent_pid(two.run_dir)
    await eventually_async(lambda: not pid_alive(pid), what="the released node's agent ends")


async def test_a_push_to_the_warm_node_sends_only_what_changed(
    make_engine: EngineFactory, make_job: Callable[..., JobSpec]
) -> None:
    engine = await make_engine(local={"keep_warm_s": 60})
    files = {"a.bin": "x" * 1_000_000, "b.txt": "one\n", "c.txt": "keep\n", "e.txt": "gone\n"}
    fields = {
        "run": "ls -A > listing.txt; cat b.txt > seen.txt; echo touched >> c.txt",
        "outputs": ["listing.txt", "seen.txt", "c.txt"],
        "workspace": {"workdir": "."},
    }
    job = make_job(files, **fields)
    one = await run_to_end(engine, job)
    assert one.state == "COMPLETED", one.reason
    project = job.source.parent
    (project / "b.txt").write_text("two\n")  # changed
    (project / "e.txt").unlink()  # removed
    (project / "d.txt").write_text("new\n")  # added
    two = await run_to_end(engine, job)
    assert two.state == "COMPLETED", two.reason
    (push,) = run_json(two.run_dir)["push"]
    # a.bin and job.toml were held unchanged; c.txt, changed on the node by the job, is sent
    assert push["reused_files"] == 2 and push["reused_bytes"] > 1_000_000, push
    assert push["sent_bytes"] < 100, push
    outputs = two.run_dir / "outputs"
    listing = sorted((outputs / "listing.txt").read_text().split())
    assert listing == ["a.bin", "b.txt", "c.txt", "d.txt", "job.toml", "listing.txt"]
    assert (outputs / "seen.txt").read_text() == "two\n"
    assert (outputs / "c.txt").read_text() == "keep\ntouched\n"
    await _release_all(engine)


async def test_cold_rents_a_new_node_and_a_lost_warm_node_is_rented_anew(
    make_engine: EngineFactory, make_job: Callable[..., JobSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warm, "CLAIM_TIMEOUT_S", 1.0)  # the lost node's silence, shorter
    engine = await make_engine(local={"keep_warm_s": 60})
    job = make_job(run="echo hi")
    one = await run_to_end(engine, job)
    cold = await engine.submit(job, "local", cold=True)
    two = await asyncio.wait_for(engine.wait(cold), 60)
    assert agent_pid(two.run_dir) != agent_pid(one.run_dir)
    assert _boot_detail(two.run_dir, BootPhase.WARM_REUSED) is None
    assert len(engine.warm_nodes()) == 2
    released = engine.warm_nodes()[1].node_id  # the newer: the one a claim tries first
    assert await engine.release_warm(released) == []
    assert [n.node_id for n in engine.warm_nodes()] != [released]
    await eventually_async(lambda: not pid_alive(agent_pid(two.run_dir)), what="released")
    kill_quietly(agent_pid(one.run_dir))  # the other is lost between runs
    three = await run_to_end(engine, job)
    assert three.state == "COMPLETED", three.reason
    assert _boot_detail(three.run_dir, BootPhase.WARM_REUSED) is None
    assert agent_pid(three.run_dir) not in (agent_pid(one.run_dir), agent_pid(two.run_dir))
    await _release_all(engine)


async def test_a_failed_setup_keeps_the_healthy_node_and_a_capped_run_does_not(
    make_engine: EngineFactory, make_job: Callable[..., JobSpec]
) -> None:
    engine = await make_engine(local={"keep_warm_s": 60, "caps": Caps(max_hours=0.0005)})
    failed = await run_to_end(engine, make_job(setup="exit 3", run="true"))
    assert failed.state == "FAILED" and "setup" in (failed.reason or "")
    (kept,) = engine.warm_nodes()  # the job failed, its node did not
    capped = await run_to_end(engine, make_job(run="sleep 60", folder="capped"))
    assert "cap reached" in (capped.reason or ""), capped.reason
    assert capped.node is not None and capped.node.node_id == kept.node_id  # it took the node
    assert engine.warm_nodes() == []  # and a capped run's node is not kept
    assert not pid_alive(agent_pid(capped.run_dir))


async def test_a_parked_node_counts_against_max_nodes(
    make_engine: EngineFactory, make_job: Callable[..., JobSpec]
) -> None:
    engine = await make_engine(local={"keep_warm_s": 60, "max_nodes": 1})
    job = make_job(run="echo hi")
    await run_to_end(engine, job)
    cold = await engine.submit(job, "local", cold=True)  # a fresh node: no slot is free

    def told() -> bool:
        view = engine.run(cold)
        return view is not None and any("kept warm" in a for a in view.all_alerts)

    await eventually_async(told, what="the queued run told why it waits")
    assert engine.run(cold).state == "PENDING"
    assert await engine.release_warm() == []
    view = await asyncio.wait_for(engine.wait(cold), 60)
    assert view.state == "COMPLETED", view.reason
    await _release_all(engine)


async def test_an_unclaimed_warm_node_releases_itself_with_its_operator_gone(
    tmp_path: Path, make_job: Callable[..., JobSpec]
) -> None:
    run_dir = await _kept_hello(tmp_path, make_job, keep_warm_s=1.5)  # no operator is left
    pid = agent_pid(run_dir)
    (node,) = [e for e in events(run_dir) if e.kind == "node" and e.state == "warm"]
    root = node_root(node.node_id)
    assert pid_alive(pid) and root.is_dir()  # kept warm past its run
    await eventually_async(
        lambda: not pid_alive(pid) and not root.exists(), what="the node released itself"
    )


async def test_swjob_nodes_lists_the_warm_node_and_releases_it(
    tmp_path: Path, make_job: Callable[..., JobSpec]
) -> None:
    kept_from = time.time()  # the node's 600 s run from a moment after this one
    pid = agent_pid(await _kept_hello(tmp_path, make_job, keep_warm_s=600))
    header, row = render(warm_nodes())
    assert header.split() == ["POOL", "NODE", "STATE", "IDLE", "$/H", "BILLED", "EXPIRES", "IN"]
    assert row.split()[0] == "local" and row.split()[2] == "warm" and "9 m" in row
    listed = swjob("nodes", "--json", cwd=tmp_path).stdout.splitlines()
    (shown,) = [json.loads(line) for line in listed]
    least = 600 - (time.time() - kept_from)  # however long a loaded machine took to here
    assert shown["pool"] == "local" and least <= shown["expires_in_s"] <= 600, shown
    assert "warm_key" not in shown and "agent_ticket" not in shown  # the node's credential
    done = swjob("nodes", "release", shown["node_id"], cwd=tmp_path)
    assert done.returncode == 0 and "released 1 warm node(s)" in done.stdout, done.stderr
    assert not pid_alive(pid)
    assert render(warm_nodes()) == ["no warm nodes (a pool keeps them with keep_warm_s)"]


def warm_nodes() -> list[WarmNodeView]:
    return [view(node) for node in listing()]


async def _kept_hello(tmp_path: Path, make_job: Callable[..., JobSpec], keep_warm_s: float) -> Path:
    """A hello job run to its end on a local pool that keeps nodes `keep_warm_s`, by an
    engine closed since (its operator is gone); its landing dir."""
    async with engine_with(tmp_path / "runs", keep_warm_s=keep_warm_s) as engine:
        view = await run_to_end(engine, make_job(run="echo hi"))
    assert view.state == "COMPLETED", view.reason
    return view.run_dir
