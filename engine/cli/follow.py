"""`swjob run` and `swjob attach`: drive or recover a run in this process and print it live.

Ctrl-C (or SIGTERM) is the operator's stop: the run is stopped and its node torn
down, never abandoned. `attach` starts an engine, which takes over the runs its
identity owned before a crash (engine/run/recovery.py), prints the run's history from
its events.jsonl and follows it live; a run owned by another live swjob process is
followed read-only from its event log.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from rich.console import Console

from engine.cli.render import RunPrinter
from engine.engine import Engine, EngineConfig
from engine.jobs.jobspec import JobSpec
from engine.jobs.pools import PoolSet
from engine.report.datastream import Subscription, read_events
from engine.state.store import Store

TAIL_POLL_S = 0.25


async def run_and_follow(job: JobSpec, pools: PoolSet, pool: str, runs_dir: Path) -> int:
    engine = Engine(EngineConfig(runs_dir=runs_dir, pools=pools))
    sub = engine.subscribe()  # before start: the start-up checks' warnings are for the user too
    await engine.start()
    printer = RunPrinter(Console(highlight=False, soft_wrap=True))
    try:
        run_id = await engine.submit(job, pool)
        view = engine.run(run_id)
        printer.console.print(f"[dim]run {run_id} → {view.run_dir if view else '?'}[/]")
        return await _follow(engine, sub, run_id, printer, after_seq=0)
    finally:
        sub.close()
        await engine.close(stop_running=True)


async def attach(run_ref: str, pools: PoolSet) -> int:
    store = Store()
    try:
        view = store.find(run_ref)
    finally:
        store.close()
    printer = RunPrinter(Console(highlight=False, soft_wrap=True))
    if view is None:
        printer.console.print(f"[red]error:[/] no run {run_ref!r} (or the prefix is not unique)")
        return 1
    engine = Engine(EngineConfig(runs_dir=view.run_dir.parent.parent, pools=pools))
    sub = engine.subscribe()
    await engine.start()
    try:
        live = engine.running_run(view.run_id)
        seen = _replay(view.run_dir / "events.jsonl", printer)
        if live:
            return await _follow(engine, sub, view.run_id, printer, after_seq=seen)
    finally:
        sub.close()
        await engine.close(stop_running=True)
    return await _tail(view.run_dir / "events.jsonl", printer, seen)


def _replay(path: Path, printer: RunPrinter) -> int:
    """Print a run's history; returns the last sequence number printed."""
    last = 0
    for event in read_events(path):
        if event.kind != "transfer":  # progress bars of the past are noise
            printer(event)
        last = event.seq
    return last


async def _follow(
    engine: Engine, sub: Subscription, run_id: str, printer: RunPrinter, after_seq: int
) -> int:
    _on_interrupt(engine, run_id, printer)
    async for event in sub:
        if event.run_id == "" and event.kind == "alert":  # engine-wide: retries, orphans
            printer(event)
        elif event.run_id == run_id and event.seq > after_seq:
            printer(event)
            if event.kind == "finished":
                break
    view = await engine.wait(run_id)
    return 0 if view.state == "COMPLETED" else 1


async def _tail(path: Path, printer: RunPrinter, after_seq: int) -> int:
    """Follow a run another live process drives, from its event log, until it finishes."""
    if after_seq and any(e.kind == "finished" for e in read_events(path)[-3:]):
        return _exit_code(path)
    printer.console.print("[dim]driven by another swjob process; following its event log[/]")
    while True:
        for event in read_events(path):
            if event.seq > after_seq:
                printer(event)
                after_seq = event.seq
                if event.kind == "finished":
                    return _exit_code(path)
        await asyncio.sleep(TAIL_POLL_S)


def _exit_code(path: Path) -> int:
    finished = [e for e in read_events(path) if e.kind == "finished"]
    return 0 if finished and finished[-1].state == "COMPLETED" else 1


def _on_interrupt(engine: Engine, run_id: str, printer: RunPrinter) -> None:
    """Ctrl-C is the operator's stop: the run is stopped and its node torn down, not abandoned."""

    pending: set[asyncio.Task[None]] = set()

    def stop() -> None:
        task = asyncio.ensure_future(_stop(engine, run_id, printer))
        pending.add(task)
        task.add_done_callback(pending.discard)

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop)
    loop.add_signal_handler(signal.SIGTERM, stop)


async def _stop(engine: Engine, run_id: str, printer: RunPrinter) -> None:
    view = engine.run(run_id)
    if view is None or not view.stoppable:
        printer.console.print("[yellow]tearing down the node; please wait[/]")
        return
    printer.console.print("[yellow]stopping: the job is stopped and its node torn down[/]")
    await engine.stop(run_id)
