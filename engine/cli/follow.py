"""`swjob run` and `swjob attach`: drive or adopt a run in this process and print it live.

`swjob run` drives the run it submits and nothing else (engine/state/ownership.py),
and returns as soon as that run has ended — or, when its node let it down and the pool
allows more attempts, the last attempt of its chain. Ctrl-C, SIGTERM and SIGHUP (a
closed terminal) are the operator's stop: the run is stopped and its node torn down,
never abandoned. `attach` prints the run's history from its events.jsonl, then adopts
the run if its owner is gone and carries it to its end; a run another live swjob
process drives is followed read-only from its event log — and adopted the moment that
process goes away; interrupting a follower ends only the follower. Either way it then
goes on to the run's next attempts, starting one that was recorded but never started
(engine/run/chain.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from engine.cli.lookup import find_run, no_such_run
from engine.cli.render import RunPrinter
from engine.engine import Engine, EngineConfig, SubmitError
from engine.jobs.jobspec import JobSpec
from engine.jobs.pools import PoolSet
from engine.report.datastream import Subscription, read_events
from engine.report.events import Event
from engine.state import ownership

TAIL_POLL_S = 0.25
INTERRUPTED = 130  # the shell's code for "ended by Ctrl-C"
ADOPT_RETRIES = 8
"""How often an unfinished run whose lease was taken, then free, is tried again: other
processes hold an ownerless run's lease for a moment (gc's owner check, an index open
writing its kept row in); taking that for the run's end left it unowned."""


async def run_and_follow(
    job: JobSpec, pools: PoolSet, pool: str, runs_dir: Path, *, cold: bool = False
) -> int:
    engine = Engine(EngineConfig(runs_dir=runs_dir, pools=pools))
    sub = engine.subscribe()  # before start: the start-up checks' warnings are for the user too
    await engine.start()
    printer = RunPrinter(Console(highlight=False, soft_wrap=True))
    try:
        try:
            run_id = await engine.submit(job, pool, cold=cold)
        except SubmitError as exc:
            printer.console.print(f"[red]error:[/] {escape(str(exc))}")
            return 1
        view = engine.run(run_id)
        printer.console.print(f"[dim]run {run_id} → {view.run_dir if view else '?'}[/]")
        code = await _follow(engine, sub, run_id, printer, after_seq=0)
        return await _follow_chain(engine, sub, run_id, printer, code)
    finally:
        sub.close()
        await engine.close(stop_running=True)


async def attach(run_ref: str, pools: PoolSet) -> int:
    view = find_run(run_ref)
    printer = RunPrinter(Console(highlight=False, soft_wrap=True))
    if view is None:
        printer.console.print(f"[red]error:[/] {escape(no_such_run(run_ref))}")
        return 1
    engine = Engine(EngineConfig(runs_dir=view.run_dir.parent.parent, pools=pools))
    sub = engine.subscribe()
    await engine.start()
    try:
        code = await _carry_on(engine, sub, view.run_id, printer, view.run_dir / "events.jsonl")
        return await _follow_chain(engine, sub, view.run_id, printer, code)
    except SubmitError as exc:
        printer.console.print(f"[red]error:[/] {escape(str(exc))}")
        return 1
    finally:
        sub.close()
        await engine.close(stop_running=True)


async def _follow_chain(
    engine: Engine, sub: Subscription, run_id: str, printer: RunPrinter, code: int
) -> int:
    """Go on from `run_id` (ended with exit `code`) through its next attempts, if its node
    let it down; the exit code is the last attempt's. A follower interrupted stays so."""
    while code != INTERRUPTED and (following := engine.successor(run_id)) is not None:
        run_id = following
        await engine.adopt(run_id)  # a recorded attempt nobody started is started here
        view = engine.run(run_id)
        if view is None:  # another process is starting it: its events say when
            printer.console.print(f"[yellow]next attempt: run {run_id}[/]")
            return code
        printer.console.print(
            f"[yellow]attempt {view.attempt}/{view.attempts}: run {run_id} on a new node[/]"
        )
        code = await _carry_on(engine, sub, run_id, printer, view.run_dir / "events.jsonl")
    return code


async def _carry_on(
    engine: Engine, sub: Subscription, run_id: str, printer: RunPrinter, events: Path
) -> int:
    """Print the run's history, then follow it to its end: driving it when this engine
    does or can (its owner is gone), else reading the live owner's event log."""
    seen = 0 if engine.running_run(run_id) else _replay(events, printer)
    retries = ADOPT_RETRIES
    while True:
        if await engine.adopt(run_id):
            return await _follow(engine, sub, run_id, printer, after_seq=seen)
        if not ownership.has_live_owner(run_id):
            if retries and not _finished(events):  # its lease was held a moment: try again
                retries -= 1
                await asyncio.sleep(TAIL_POLL_S)
                continue
            return _exit_code(events)  # it ended before we could take it
        leave = _leave_on_interrupt()
        seen, code = await _tail_while_owned(events, printer, seen, run_id, leave)
        if code is not None:
            return code


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


async def _tail_while_owned(
    path: Path, printer: RunPrinter, after_seq: int, run_id: str, leave: asyncio.Event
) -> tuple[int, int | None]:
    """Follow a run another live process drives, from its event log: returns (last seq
    printed, exit code) when it finishes or `leave` is set (130), or (last seq, None)
    when its owner is gone."""
    printer.console.print("[dim]driven by another swjob process; following its event log[/]")
    while True:
        for event in read_events(path):
            if event.seq > after_seq:
                printer(event)
                after_seq = event.seq
                if event.kind == "finished":
                    return after_seq, _exit_code(path)
        if not ownership.has_live_owner(run_id):
            return after_seq, None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(TAIL_POLL_S):
                await leave.wait()
        if leave.is_set():
            printer.console.print("[dim]stopped following; the run goes on where it is driven[/]")
            return after_seq, INTERRUPTED


def _leave_on_interrupt() -> asyncio.Event:
    """While this process only follows a run, Ctrl-C, SIGTERM and SIGHUP end the follow:
    the run is not ours to stop (adopting it later installs the operator's stop)."""
    leave = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, leave.set)
    return leave


def _finished(path: Path) -> list[Event]:
    """The run's Finished events in its log (none while it has not ended)."""
    return [e for e in read_events(path) if e.kind == "finished"]


def _exit_code(path: Path) -> int:
    finished = _finished(path)
    return 0 if finished and finished[-1].state == "COMPLETED" else 1


def _on_interrupt(engine: Engine, run_id: str, printer: RunPrinter) -> None:
    """Ctrl-C, SIGTERM and SIGHUP are the operator's stop: the run is stopped and its node
    torn down, not abandoned; the process then ends with the run."""

    pending: set[asyncio.Task[None]] = set()

    def stop() -> None:
        task = asyncio.ensure_future(_stop(engine, run_id, printer))
        pending.add(task)
        task.add_done_callback(pending.discard)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop)


async def _stop(engine: Engine, run_id: str, printer: RunPrinter) -> None:
    view = engine.run(run_id)
    if view is None or not view.stoppable:
        printer.console.print("[yellow]tearing down the node; please wait[/]")
        return
    printer.console.print("[yellow]stopping: the job is stopped and its node torn down[/]")
    await engine.stop(run_id)
