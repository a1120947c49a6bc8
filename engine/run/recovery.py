"""Carry the runs of a crashed or killed engine process to their end.

While the operator is away the agent keeps running the job and journals its events.
An engine that adopts a run whose owner is gone (engine/state/ownership.py) rebuilds
the run's FSM state from its `events.jsonl`, re-points the node at itself with the
run's re-attach credential (engine/run/reclaim.py), lets it rejoin with its original
token, has the agent replay what was missed (from the last node sequence number the
run's log holds), and re-issues the command that was in flight — push, pull,
teardown — each of which is safe to repeat; a node that joined while it booted gets
what a fresh join gets (RunDriver.after_join: its host pre-flight, unless a mark says it
passed, then the sink). A node that does not rejoin within the
run's node-loss deadline (sooner, when the provider sees it gone) is lost: the run is
FAILED "node lost" and the node torn down through the provider.

A run whose operator died while it was still queued for a slot of its pool (PENDING,
no node ever asked for) has nothing to rejoin and nothing that could leak: the adopter
starts it, as its operator would have once a slot freed. A run that got any further
without its node's handle on record (the operator died mid-provision) is FAILED, since
its node may exist and must not be rented twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.protocol import Step
from engine.jobs import envargs
from engine.jobs.jobspec import JobFileError, JobSpec, load_job
from engine.jobs.pools import Pool
from engine.providers.base import Provider, heartbeat_for, silence_for
from engine.report import events as ev
from engine.report.views import RunView
from engine.run import fsm

if TYPE_CHECKING:
    from engine.run.orchestrator import RunDriver


RECOVERED = "recovered after operator restart"
QUEUED_RESTART = "operator restarted while the run was queued: starting it now"
"""What an adopter says (instead of "recovered after operator restart") of a run it found
still waiting for a slot of its pool."""


def job_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def node_heartbeat(saved: dict[str, Any], heartbeat_s: float) -> float:
    """The heartbeat an adopted run's node needs (at most `heartbeat_s`): its agent keeps
    the silence deadline it was started with, from the run's pool as it was then, whatever
    the adopter's pools file says now. Slower, and the node takes the adopter for dead
    between two heartbeats and redials, again and again, cutting every transfer."""
    if not saved.get("pool_def"):
        return heartbeat_s
    started_on = Pool.model_validate_json(saved["pool_def"])
    return heartbeat_for(heartbeat_s, silence_for(started_on.node_lost_after_s))


def recovered_job(view: RunView, recovery: dict[str, Any]) -> tuple[JobSpec, str | None]:
    """The run's job as submitted, or a stand-in and the reason it cannot be continued.

    Secrets are never stored, so the job is read again from its file; a file that
    changed since submission would run a different job, so such a run is failed.
    """
    path = Path(recovery.get("job_file", ""))
    try:
        if job_digest(path) != recovery.get("job_sha256"):
            problem = "job file changed while the operator was away"
        else:
            job = load_job(path).with_params(recovery.get("params") or {})  # as given
            try:
                return envargs.restore(job, recovery.get("env_args"), os.environ), None
            except JobFileError as exc:
                problem = str(exc)
    except (OSError, JobFileError):
        problem = "job file is gone or unreadable"
    stand_in = JobSpec(
        name=view.job_name, run="", setup=None, workspace=None, outputs=[], env={}, source=path
    )
    return stand_in, f"could not resume after operator restart: {problem}"


def fsm_state_of(events: list[ev.Event], job: JobSpec) -> fsm.FsmState:
    """The FSM state a run had reached, from the transitions in its event log."""
    state = fsm.FsmState(has_setup=job.setup is not None, has_workspace=job.workspace is not None)
    for event in events:
        if isinstance(event, ev.Transition):
            state = fsm.FsmState(
                state=fsm.JobState(event.to_state),
                phase=fsm.Phase(event.to_phase),
                has_setup=state.has_setup,
                has_workspace=state.has_workspace,
                exit_code=event.exit_code if event.exit_code is not None else state.exit_code,
                reason=state.reason or event.reason,
            )
    return state


async def still_queued(provider: Provider, run_id: str, events: list[ev.Event]) -> bool:
    """True when `run_id` was waiting for a slot of its pool when its operator died: PENDING
    in provisioning, not one boot step or node on record since it came to this pool, and no
    trace of a node asked for it on this pool (a ledger intent, a node directory). Any
    sign that a node may have been asked for keeps the run off this path (call it only
    when no node was found)."""
    transitions = [e for e in events if isinstance(e, ev.Transition)]
    if not transitions or (transitions[-1].to_state, transitions[-1].to_phase) != (
        fsm.JobState.PENDING.value,
        fsm.Phase.PROVISIONING.value,
    ):
        return False
    passed = [i for i, e in enumerate(events) if isinstance(e, ev.PoolPassed)]
    on_this_pool = events[passed[-1] + 1 :] if passed else events  # fallover.py: it moved
    if any(isinstance(e, ev.Boot | ev.Node) for e in on_this_pool):
        return False
    return not await provider.may_have_node(run_id)


def last_node_seq(events: list[ev.Event]) -> int:
    replayable = (ev.Log, ev.GpuMetrics)
    return max((e.node_seq or 0 for e in events if isinstance(e, replayable)), default=0)


async def continue_run(driver: RunDriver, fault: str | None, *, queued: bool = False) -> None:
    """Re-issue whatever the run was doing when the previous engine died; `queued`: it was
    still waiting for a slot of its pool (still_queued)."""
    state = driver.fsm_state
    terminal = state.state is not None and state.state.terminal
    if fault is not None and not terminal:
        driver.post(fsm.NodeFault(fault))
    elif state.phase is fsm.Phase.NEW:  # indexed, never begun: nothing was asked for yet
        driver.begin()
    elif queued and driver.handle is None:  # no node was asked for yet: queue for one now
        driver.post(fsm.QueuedRunAdopted())
    elif driver.handle is None and not terminal:
        driver.post(fsm.NodeFault("operator restarted before the node was provisioned"))
    elif driver.handle is None or state.phase is fsm.Phase.TEARDOWN:
        await driver.teardown()
    elif state.phase is fsm.Phase.PROVISIONING:
        await _rejoin_then(driver, driver.pool.boot_timeout_s, ev.NodeState.READY)
    else:
        await _resume_active(driver, state)


async def _never_delivered(driver: RunDriver) -> bool:
    """True when the engine recorded a step as started but died before its RunStep left:
    the node is idle, and its replayed journal (up to where its Hello said it ends) holds
    no exit for the step.

    The whole replay is waited for, however long: a step that flooded its log while the
    operator was away replays for minutes, and judging before its exit arrives ran the job
    a second time. A node that goes silent meanwhile is lost, which cancels this wait."""
    hello = driver.session.hello
    if hello is None or hello.busy:
        return False
    while driver.session.last_seq < hello.last_seq and not driver.step_exited:
        await asyncio.sleep(0.05)
    return not driver.step_exited


async def _rejoin_then(driver: RunDriver, timeout_s: float, node_state: ev.NodeState) -> bool:
    if await driver.await_join(timeout_s, node_state):
        await driver.falling_over(driver.after_join)  # its pre-flight, unless it passed
        return True
    reason = f"node did not rejoin within {timeout_s:g} s after the run was adopted"
    driver.post(fsm.NodeLost(reason))
    return False


async def _resume_active(driver: RunDriver, state: fsm.FsmState) -> None:
    step = {fsm.Phase.SETUP: Step.SETUP, fsm.Phase.RUN: Step.RUN}.get(state.phase)
    if step is not None and step.value in driver.started:
        driver.expect_exit(step)  # before the rejoin: the replay may carry its exit at once
    if not await _rejoin_then(driver, driver.session.deadline_s, ev.NodeState.BUSY):
        return
    match state.phase:
        case fsm.Phase.MATERIALIZING:
            await driver.transfers.push()
        case fsm.Phase.SETUP | fsm.Phase.RUN:
            assert step is not None
            if step.value not in driver.started or await _never_delivered(driver):
                command = driver.job.run if step is Step.RUN else driver.job.setup or ""
                await driver.start_step(step, command)
            if step is Step.RUN:
                driver.transfers.live.start()  # the outputs keep syncing after a restart
        case fsm.Phase.COLLECTING:
            failed = state.state is fsm.JobState.FAILED
            driver.outputs = await driver.transfers.pull(best_effort=failed)
            if failed:
                await driver.teardown()
