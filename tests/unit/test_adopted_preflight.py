"""An engine that adopts a run whose node joined while it booted gives that node what a
fresh join gets (RunDriver.after_join): its host pre-flight before any of the run's
files reach it, unless a mark says it passed before the first engine died (its workspace
may be on it already). A real driver and node session; the node's end of the control
channel is played: it answers the pre-flight and records what it is sent."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.protocol import (
    Hello,
    NodeFacts,
    Preflight,
    PreflightCheck,
    PreflightDone,
    RunStep,
    Welcome,
)
from engine.jobs.jobspec import JobSpec
from engine.providers.base import Bootstrap, NodeHandle
from engine.report import events as ev
from engine.report.datastream import Datastream
from engine.report.views import RunView
from engine.run import fsm, recovery
from engine.run.control import NodeSession
from engine.run.orchestrator import RunDriver
from tests.support.vast import gpu_pool

RUN = "r-adopted"
TOKEN = "tok-adopted"
FACTS = NodeFacts(
    hostname="h", os="linux", cpus=2, memory_mb=1024, disk_free_mb=50_000,
    python_version="3.12", agent_version="0.1.0",
)  # fmt: skip


class PlayedNode:
    """The node's end of the channel: records each message, answers a Preflight."""

    def __init__(self, gpus: int = 1) -> None:
        self.sent: list[Any] = []
        self._gpus = gpus
        self._answers: asyncio.Queue[Any] = asyncio.Queue()

    async def send(self, msg: Any) -> None:
        self.sent.append(msg)
        if isinstance(msg, Preflight):
            seen = f"{self._gpus} GPUs visible"
            check = PreflightCheck(name="gpus", ok=self._gpus > 0, detail=seen)
            await self._answers.put(PreflightDone(seq=1, checks=[check]))

    async def recv(self) -> Any:
        return await self._answers.get()

    def close(self, *_: Any) -> None:
        """The session closes its connection at the run's end."""

    def asked(self, kind: type) -> bool:
        return any(isinstance(m, kind) for m in self.sent)


class Provider:
    """The rented node's provider: it never sees the node die."""

    def __init__(self) -> None:
        self.destroyed: list[str] = []

    async def node_exited(self, _handle: NodeHandle) -> Any:
        await asyncio.Event().wait()

    async def teardown(self, handle: NodeHandle) -> None:
        self.destroyed.append(handle.node_id)


def _mark(phase: ev.BootPhase, detail: str | None = None) -> ev.Boot:
    return ev.Boot(run_id=RUN, phase=phase, at=datetime.now(UTC), detail=detail)


async def _adopted(
    tmp_path: Path, *marks: ev.Boot, node: PlayedNode | None = None, **facts: Any
) -> tuple[RunDriver, PlayedNode]:
    """An adopted run provisioning on a Vast pool (at most 2 offers tried), its node
    booted as `marks` say, its recovery facts `facts`, carried on by recovery."""
    now = datetime.now(UTC)
    view = RunView(
        run_id=RUN, job_name="j", pool="gpu", state="PENDING", phase="provisioning",
        created=now, updated=now, run_dir=tmp_path, boot=list(marks),
    )  # fmt: skip
    job = JobSpec(
        name="j", run="true", setup=None, workspace=None, outputs=[], env={},
        source=tmp_path / "job.toml",
    )  # fmt: skip
    holder: list[RunDriver] = []
    session = NodeSession(
        RUN, TOKEN, heartbeat_s=30, deadline_s=60,
        on_event=lambda msg: holder[0].on_agent_event(msg), on_lost=lambda _: None,
    )  # fmt: skip
    driver = RunDriver(
        view=view, job=job, pool=gpu_pool(max_offers_tried=2),
        provider=Provider(),  # type: ignore[arg-type]
        session=session, bootstrap=Bootstrap(RUN, "ticket", "engine", TOKEN),
        stream=Datastream(), stop_grace_s=1, on_change=lambda *_: None,
    )  # fmt: skip
    holder.append(driver)
    driver.recovery.update(facts)
    state = fsm.FsmState(state=fsm.JobState.PENDING, phase=fsm.Phase.PROVISIONING)
    driver.resume(state, NodeHandle(provider="vastai", node_id="7", offer={"machine_id": 70}))
    node = node or PlayedNode()
    await session.attach(node, node, Hello(run_id=RUN, token=TOKEN, facts=FACTS), "node-7")
    driver.start_work(recovery.continue_run(driver, None))
    return driver, node


async def _until_it_runs(driver: RunDriver, node: PlayedNode) -> None:
    loop = asyncio.create_task(driver.run())
    try:
        async with asyncio.timeout(10):
            while not node.asked(RunStep):
                await asyncio.sleep(0.01)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


async def test_a_node_adopted_before_its_preflight_is_checked(tmp_path: Path) -> None:
    booted = (_mark(ev.BootPhase.INSTANCE_CREATED), _mark(ev.BootPhase.AGENT_JOINED))
    driver, node = await _adopted(tmp_path, *booted)
    await _until_it_runs(driver, node)
    kinds = [type(m) for m in node.sent if not isinstance(m, Welcome)]
    assert Preflight in kinds, kinds  # checked before the job runs
    assert kinds.index(Preflight) < kinds.index(RunStep)
    [mark] = [m for m in driver.view.boot if m.phase is ev.BootPhase.PREFLIGHT]
    assert (mark.detail or "").startswith("passed: gpus ok")


async def test_a_node_adopted_after_its_preflight_passed_is_not_checked_again(
    tmp_path: Path,
) -> None:
    failed = _mark(ev.BootPhase.PREFLIGHT, "failed: gpus: 0 GPUs visible")  # a node before
    passed = _mark(ev.BootPhase.PREFLIGHT, "passed: gpus ok")
    driver, node = await _adopted(tmp_path, failed, _mark(ev.BootPhase.AGENT_JOINED), passed)
    await _until_it_runs(driver, node)
    assert not node.asked(Preflight)


async def test_an_adopter_counts_the_offers_that_failed_before(tmp_path: Path) -> None:
    """The pool tries 2 offers: one failed before the first engine died, the adopted node
    fails too, so the run ends naming both (the pre-flight rows are recovery facts)."""
    before = {
        "pool": "gpu", "provider": "vastai", "node_id": "6", "machine_id": 60,
        "passed": False, "failed": "gpus: 0 GPUs visible", "checks": [],
    }  # fmt: skip
    failed = _mark(ev.BootPhase.PREFLIGHT, "failed: gpus: 0 GPUs visible")
    joined = _mark(ev.BootPhase.AGENT_JOINED)
    driver, node = await _adopted(tmp_path, failed, joined, node=PlayedNode(0), preflight=[before])
    async with asyncio.timeout(10):
        view = await driver.run()
    assert node.asked(Preflight) and not node.asked(RunStep)
    assert view.state == "FAILED", view
    assert (view.reason or "").startswith("provisioning failed: pre-flight failed on 2 offers")
    assert "host 60 (node 6)" in (view.reason or "") and "host 70 (node 7)" in (view.reason or "")
    assert [row["node_id"] for row in driver.preflight.tried] == ["6", "7"]
