"""Node loss: an agent killed, frozen, or cut off from the network mid-run is declared
NodeLost within the deadline; the run FAILS with that reason, the node is torn down and no
process of the job survives. Real agents, real iroh; faults injected by pid or by link."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.engine import Engine
from engine.report import events as ev
from engine.report.views import RunView
from engine.state.paths import cache_dir
from tests.reliability.netns import Netns, netns_provider, netns_unavailable
from tests.support.engines import engine_with
from tests.support.processes import kill_quietly, pid_alive
from tests.support.tap import Tap, pids_in_logs

pytestmark = [pytest.mark.timeout(90)]

DEADLINE_S = 2.0
HEARTBEAT_S = 0.5  # engine_with's: silence counts from the node's last message, up to one
# heartbeat before the fault
# A job that announces its processes: a child that ignores SIGTERM, and the step's shell.
JOB = "sh -c 'trap \"\" TERM; sleep 300' & echo pid=$!; echo pid=$$; echo started; wait"

Inject = Callable[[Engine, str, int], Awaitable[None]]


@dataclass
class Loss:
    view: RunView
    detected_s: float  # fault injected → NodeLost transition
    finished_s: float  # fault injected → run finished (node torn down)
    job_pids: list[int]
    node_dir: Path


async def lose_node(engine: Engine, job, inject: Inject) -> Loss:
    """Run `job` until both its processes run, inject the fault, follow the run to its end."""
    tap = Tap(engine)
    run_id = await engine.submit(job, "local")
    pids: list[int] = []
    try:
        await tap.until(lambda e: e.run_id == run_id and _says(e, "started"))
        pids = [p for e in tap.events(run_id) for p in pids_in_logs(e)]
        node = engine.run(run_id).node
        agent_pid = int(node.offer["pid"])
        injected = time.monotonic()
        await inject(engine, run_id, agent_pid)
        lost_at, _ = await tap.until(
            lambda e: isinstance(e, ev.Transition) and e.run_id == run_id and e.cause == "NodeLost"
        )
        view = await asyncio.wait_for(engine.wait(run_id), 60)
        return Loss(
            view,
            lost_at - injected,
            time.monotonic() - injected,
            pids,
            cache_dir() / "nodes" / node.node_id,
        )
    finally:
        tap.close()
        for pid in pids:
            kill_quietly(pid)


def assert_lost_and_clean(loss: Loss, reason_part: str) -> None:
    view = loss.view
    assert view.state == "FAILED", view
    assert view.reason.startswith("node lost: ") and reason_part in view.reason, view.reason
    assert view.node.state == "gone" and not loss.node_dir.exists()
    assert len(loss.job_pids) == 2 and not any(pid_alive(p) for p in loss.job_pids)
    assert "started" in (view.run_dir / "logs" / "run.log").read_text()  # the log is kept


async def test_sigkilled_agent_is_lost_at_once(tmp_path, make_job, record_fault) -> None:
    async def sigkill(engine: Engine, run_id: str, agent_pid: int) -> None:
        os.kill(agent_pid, signal.SIGKILL)

    async with engine_with(tmp_path / "runs", deadline_s=DEADLINE_S) as engine:
        loss = await lose_node(engine, make_job(run=JOB), sigkill)
    assert_lost_and_clean(loss, "agent process exited with code -9")  # its server saw it
    assert loss.detected_s < 1.0  # the provider sees the exit; no deadline needed
    record_fault("agent SIGKILLed mid-run", loss.detected_s, _outcome(loss))


async def test_frozen_agent_is_lost_after_the_deadline(tmp_path, make_job, record_fault) -> None:
    frozen: list[int] = []

    async def sigstop(engine: Engine, run_id: str, agent_pid: int) -> None:
        frozen.append(agent_pid)
        os.kill(agent_pid, signal.SIGSTOP)

    try:
        async with engine_with(tmp_path / "runs", deadline_s=DEADLINE_S) as engine:
            loss = await lose_node(engine, make_job(run=JOB), sigstop)
    finally:
        for pid in frozen:
            kill_quietly(pid, signal.SIGCONT)
    assert_lost_and_clean(loss, "no heartbeat")
    assert DEADLINE_S - HEARTBEAT_S <= loss.detected_s < DEADLINE_S + 1.5
    record_fault("agent frozen (SIGSTOP) mid-run", loss.detected_s, _outcome(loss))


@pytest.fixture
def netns():
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    ns = Netns().open()
    try:
        yield ns
    finally:
        ns.close()


async def test_cut_network_is_lost_after_the_deadline(
    tmp_path, make_job, record_fault, netns: Netns, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def cut(engine: Engine, run_id: str, agent_pid: int) -> None:
        netns.cut()

    monkeypatch.setenv("SWJOB_IROH_BIND", f"{netns.host_ip}:0")  # the engine listens on the veth
    async with engine_with(tmp_path / "runs", deadline_s=DEADLINE_S) as engine:
        engine._providers.built["local"] = netns_provider(
            netns, stop_grace_s=engine.config.stop_grace_s
        )
        loss = await lose_node(engine, make_job(run=JOB), cut)
    assert_lost_and_clean(loss, "no heartbeat")
    assert DEADLINE_S - HEARTBEAT_S <= loss.detected_s < DEADLINE_S + 1.5
    record_fault("network cut (veth down) mid-run", loss.detected_s, _outcome(loss))


def _says(event: ev.Event, text: str) -> bool:
    return isinstance(event, ev.Log) and any(text in line.text for line in event.lines)


def _outcome(loss: Loss) -> str:
    return (
        f"FAILED '{loss.view.reason}'; node gone and job processes ended "
        f"{loss.finished_s:.1f} s after the fault"
    )
