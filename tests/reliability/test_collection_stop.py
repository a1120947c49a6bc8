"""Stop, caps and stalls act during output collection, including the
best-effort collection after a failed run, when the node still bills: the operator's stop,
a cap reached, or a collection that moves no byte for the pool's `collect_stall_s` tears
the node down; the run keeps the verdict its exit code gave. The stall is real: the agent
is frozen (SIGSTOP) as collection begins, so it neither sends nor closes anything."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

from engine.engine import Engine
from engine.jobs.pools import Caps
from engine.report import events as ev
from engine.report.views import RunView
from tests.support.engines import engine_with
from tests.support.processes import pid_alive
from tests.support.tap import Tap

pytestmark = [pytest.mark.timeout(90)]

BIG_OUTPUT = "head -c 67108864 /dev/urandom > big.bin"  # 64 MiB: not pulled in a blink
STALL_S = 1.5


async def freeze_at_collection(engine: Engine, tap: Tap, job) -> tuple[str, int]:
    """Submit `job`; SIGSTOP its agent as the run enters collection. (run id, agent pid)"""
    run_id = await engine.submit(job, "local")
    await tap.until(
        lambda e: isinstance(e, ev.Transition) and e.run_id == run_id and e.to_phase == "collecting"
    )
    agent = int(engine.run(run_id).node.offer["pid"])
    os.kill(agent, signal.SIGSTOP)
    return run_id, agent


def alerts(tap: Tap, run_id: str) -> list[str]:
    tap.drain()
    return [e.message for e in tap.events(run_id) if isinstance(e, ev.Alert)]


def assert_torn_down(view: RunView, agent: int) -> None:
    assert view.phase == "done" and view.node.state == "gone", view
    assert not pid_alive(agent)


@pytest.mark.parametrize("code", [0, 1])
async def test_a_stalled_collection_gives_up_and_keeps_the_verdict(
    tmp_path, make_job, record_fault, code: int
) -> None:
    job = make_job(run=f"{BIG_OUTPUT}; exit {code}", outputs=["big.bin"])
    # the node would be declared lost only after 30 s: the stall must end it long before
    async with engine_with(tmp_path / "runs", deadline_s=30.0, collect_stall_s=STALL_S) as engine:
        tap = Tap(engine)
        try:
            run_id, agent = await freeze_at_collection(engine, tap, job)
            frozen = time.monotonic()
            await tap.until(lambda e: isinstance(e, ev.Alert) and "stalled" in e.message)
            detected = time.monotonic() - frozen
            view = await asyncio.wait_for(engine.wait(run_id), 60)
            messages = alerts(tap, run_id)
        finally:
            tap.close()
    assert view.state == ("COMPLETED" if code == 0 else "FAILED"), view
    assert view.reason == (None if code == 0 else "run exited with code 1"), view.reason
    wanted = f"outputs not collected: collection stalled: no bytes moved for {STALL_S:g} s"
    assert wanted in messages, messages
    assert STALL_S <= detected < STALL_S + 3, detected
    assert_torn_down(view, agent)
    record_fault(
        f"node freezes during collection after exit {code} (collect_stall_s {STALL_S:g})",
        detected,
        f"{view.state}, node torn down",
        "the unsent outputs (alert names them)",
    )


@pytest.mark.parametrize("how", ["operator", "cap"])
async def test_stop_and_caps_cut_best_effort_collection_short(
    tmp_path, make_job, record_fault, how: str
) -> None:
    """Exit 1 → best-effort collection, which hangs (frozen node). Before the fix the FSM had
    no stop row there and the cap task posted once: the run waited for the node loss."""
    job = make_job(run=f"{BIG_OUTPUT}; exit 1", outputs=["big.bin"])
    async with engine_with(tmp_path / "runs", deadline_s=30.0, caps=Caps(max_hours=10.0)) as engine:
        tap = Tap(engine)
        try:
            run_id, agent = await freeze_at_collection(engine, tap, job)
            assert engine.run(run_id).stoppable  # what the CLI's Ctrl-C and the console's `s` ask
            stopped = time.monotonic()
            if how == "operator":
                await engine.stop(run_id)
            else:  # the pool's cap drops below what the run has used: the next check acts
                driver = engine._drivers[run_id]
                driver.pool = driver.pool.model_copy(update={"caps": Caps(max_hours=1e-9)})
            cut, _ = await tap.until(
                lambda e: (
                    isinstance(e, ev.Transition)
                    and e.run_id == run_id
                    and e.cause == "OperatorStop"
                )
            )
            view = await asyncio.wait_for(engine.wait(run_id), 60)
            ended = time.monotonic() - stopped
            messages = alerts(tap, run_id)
        finally:
            tap.close()
    assert view.state == "FAILED" and view.reason == "run exited with code 1", view
    why = "stopped by operator" if how == "operator" else "cap reached: max_hours"
    assert any(m.startswith(f"output collection cut short: {why}") for m in messages), messages
    assert_torn_down(view, agent)
    record_fault(
        f"{'operator stop' if how == 'operator' else 'cap reached'} during best-effort collection",
        cut - stopped,
        f"FAILED (exit code kept), node torn down {ended:.1f} s after",
        "the unsent outputs",
    )


async def test_the_hours_cap_stops_the_run_on_time(tmp_path, make_job, record_fault) -> None:
    """`max_hours` of 3 s of node life on a job that would run 5 minutes: the cap (checked
    every second) stops it like an operator stop, ~1 s past the mark at most: FAILED with
    the cap as its reason, node torn down."""
    cap_s = 3.0
    job = make_job(run="echo started; sleep 300")
    async with engine_with(tmp_path / "runs", caps=Caps(max_hours=cap_s / 3600)) as engine:
        tap = Tap(engine)
        try:
            run_id = await engine.submit(job, "local")
            _, created = await tap.until(
                lambda e: isinstance(e, ev.Boot) and e.phase == ev.BootPhase.INSTANCE_CREATED
            )
            agent = int(engine.run(run_id).node.offer["pid"])
            view = await asyncio.wait_for(engine.wait(run_id), 60)
        finally:
            tap.close()
    assert isinstance(created, ev.Boot)
    events = tap.events(run_id)
    stop = next(e for e in events if isinstance(e, ev.Transition) and e.cause == "OperatorStop")
    stopped_after = (stop.ts - created.at).total_seconds()
    assert view.state == "FAILED" and view.reason == f"cap reached: max_hours {cap_s / 3600:g}"
    assert cap_s - 0.5 <= stopped_after <= cap_s + 1.5, stopped_after
    assert_torn_down(view, agent)
    record_fault(
        f"max_hours cap of {cap_s:g} s of node life on a 5-minute job",
        stopped_after,
        f"stopped at {stopped_after:.1f} s of node life, FAILED with the cap, node torn down",
    )


@pytest.mark.parametrize("how", ["operator", "cap", "loss"])
async def test_stop_cap_or_loss_during_a_successful_collection_keeps_it_completed(
    tmp_path, make_job, record_fault, how: str
) -> None:
    """Exit 0 → collection, which hangs (frozen node). The operator stops the run, a cap is
    reached, or the node is declared lost (its deadline): the exit code decided COMPLETED,
    and every output that did not land is recorded with the reason in run.json and
    manifest.json, and said in an alert. Before, it ended FAILED and recorded nothing of
    the outputs; and with collecting left out of the FSM's active phases, it hung."""
    job = make_job(run=f"echo small > small.txt; {BIG_OUTPUT}", outputs=["big.bin", "small.txt"])
    deadline_s = 2.0 if how == "loss" else 30.0
    async with engine_with(
        tmp_path / "runs", deadline_s=deadline_s, caps=Caps(max_hours=10.0)
    ) as engine:
        tap = Tap(engine)
        try:
            run_id, agent = await freeze_at_collection(engine, tap, job)
            frozen = time.monotonic()
            if how == "operator":
                await engine.stop(run_id)
            elif how == "cap":
                driver = engine._drivers[run_id]
                driver.pool = driver.pool.model_copy(update={"caps": Caps(max_hours=1e-9)})
            view = await asyncio.wait_for(engine.wait(run_id), 60)
            ended = time.monotonic() - frozen
            messages = alerts(tap, run_id)
        finally:
            tap.close()
    why = {"operator": "stopped by operator", "cap": "cap reached", "loss": "node lost"}[how]
    assert view.state == "COMPLETED" and view.exit_code == 0 and view.reason is None, view
    assert any(m.startswith(f"output collection cut short: {why}") for m in messages), messages
    assert_torn_down(view, agent)
    summary = json.loads((view.run_dir / "run.json").read_text())
    manifest = json.loads((view.run_dir / "manifest.json").read_text())
    landed = {f["path"] for f in manifest["files"] if f["verified"]}
    assert manifest["complete"] is False and manifest["cut_short"].startswith(why)
    for name in {"big.bin", "small.txt"} - landed:  # every output that did not land, why
        assert name in summary["missing_outputs"], summary
        if name in manifest["missing"]:  # stopped before the node listed its outputs
            continue
        (entry,) = [f for f in manifest["files"] if f["path"] == name]
        assert entry["reason"].startswith(why), entry
        assert summary["outputs"]["not_landed"][name].startswith(why), summary["outputs"]
    assert "big.bin" not in landed
    record_fault(
        f"{why} during collection after exit 0",
        ended,
        "COMPLETED (exit code kept), node torn down, outputs not landed recorded with why",
        "the unsent outputs (named in run.json and manifest.json)",
    )
