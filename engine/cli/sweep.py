"""`swjob sweep`, `swjob runs --sweep` and `swjob stop --sweep`: many runs of one job.

`swjob sweep JOB --grid LR=0.1,0.01 --grid SEED=1,2` runs every combination as its own run
(its values in the job's env, named `job[LR=0.1,SEED=1]`), at most `--concurrency` at once,
under one `--max-dollars` cap for the whole sweep; prints a line as each run starts and
ends, then a table of every variant — state, exit, reason, duration, cost and the
`--metric` the job wrote — and exits 0 only when every run COMPLETED. Ctrl-C, SIGTERM and
SIGHUP halt it as the cap does: running runs stopped, queued ones never started.
`--rerun SWEEP` runs again the variants of that sweep that did not complete.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from engine.cli.render import STATE_STYLE, shown
from engine.engine import Engine, EngineConfig
from engine.jobs.jobspec import JobSpec, load_job
from engine.jobs.pools import PoolSet, load_pools
from engine.report import events as ev
from engine.report.datastream import Subscription
from engine.report.money import money
from engine.report.printable import visible
from engine.report.views import RunView
from engine.state.store import Store
from engine.sweep import record as records
from engine.sweep.grid import GridError, Variant, expand, load_params, parse_grid
from engine.sweep.record import SweepRecord
from engine.sweep.runner import Sweep, SweepRow

INTERRUPTED = 130


def command(args: argparse.Namespace) -> int:
    try:
        job_path, variants = _variants(args)
    except GridError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    job = load_job(job_path)
    pools = load_pools(args.pools)
    pools.get(args.pool)  # an unknown pool: one line, before anything runs
    for variant in variants:  # a bad name or value: one line, before anything runs
        try:
            job.with_params(variant.params)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return asyncio.run(_sweep(args, job, pools, variants))


def _variants(args: argparse.Namespace) -> tuple[Path, list[Variant]]:
    """The job file and the variants to run, from the options; GridError says what's wrong."""
    if args.rerun:
        if args.job or args.grid or args.params:
            raise GridError("--rerun takes no job, --grid or --params: it reruns a sweep's")
        old = records.load(args.rerun)
        if old is None or old.job_file is None:
            raise GridError(f"no sweep {args.rerun!r} (or more than one sweep matches it)")
        again = [Variant(m.params) for m in old.members if not _completed(m.run_id)]
        if not again:
            raise GridError(f"every run of sweep {old.sweep_id} completed: nothing to rerun")
        return Path(old.job_file), again
    if args.job is None:
        raise GridError("name a job file (or --rerun SWEEP)")
    if bool(args.grid) == bool(args.params):
        raise GridError("give --grid NAME=V1,V2 (one or more) or --params FILE")
    return args.job, load_params(args.params) if args.params else expand(parse_grid(args.grid))


def _completed(run_id: str | None) -> bool:
    if run_id is None:
        return False
    store = Store()
    try:
        view = store.find(run_id)
    finally:
        store.close()
    return view is not None and view.state == "COMPLETED"


async def _sweep(
    args: argparse.Namespace, job: JobSpec, pools: PoolSet, variants: list[Variant]
) -> int:
    console = Console(highlight=False, soft_wrap=True)
    engine = Engine(EngineConfig(runs_dir=args.runs_dir, pools=pools))
    sub = engine.subscribe()
    await engine.start()
    sweep = Sweep(
        engine, job, variants, pool=args.pool, concurrency=args.concurrency,
        max_dollars=args.max_dollars, fail_fast=args.fail_fast, metric=args.metric,
        minimize=not args.maximize,
    )  # fmt: skip
    cap = f", cap {money(args.max_dollars)}" if args.max_dollars else ""
    console.print(
        f"sweep {sweep.sweep_id}: {len(variants)} runs of {job.name} on {args.pool}, "
        f"{args.concurrency} at a time{cap}"
    )
    interrupted = _halt_on_signals(sweep)
    printing = asyncio.create_task(_print_progress(console, sub, sweep.sweep_id))
    try:
        rows = await sweep.run()
    finally:
        sub.close()
        await asyncio.gather(printing, return_exceptions=True)
        await engine.close(stop_running=True)
    print_table(console, rows, sweep.record)
    if interrupted.is_set():
        return INTERRUPTED
    return 0 if all(row.completed for row in rows) else 1


def _halt_on_signals(sweep: Sweep) -> asyncio.Event:
    """Ctrl-C, SIGTERM, SIGHUP: the operator's stop of the whole sweep."""
    seen = asyncio.Event()
    loop = asyncio.get_running_loop()

    def halt() -> None:
        seen.set()
        stopping.add(loop.create_task(sweep.stop("stopped by operator (interrupted)")))

    stopping: set[asyncio.Task[None]] = set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, halt)
    return seen


async def _print_progress(console: Console, sub: Subscription, sweep_id: str) -> None:
    """A line as each of the sweep's runs starts and ends; engine-wide alerts too."""
    names: dict[str, str] = {}
    async for event in sub:
        if isinstance(event, ev.Submitted) and event.sweep == sweep_id:
            names[event.run_id] = event.label or event.job_name
            console.print(f"  [dim]started[/]   {shown(names[event.run_id])}  {event.run_id}")
        elif isinstance(event, ev.Finished) and event.run_id in names:
            style = STATE_STYLE.get(event.state, "")
            why = f"  {shown(event.reason)}" if event.reason else ""
            console.print(
                f"  [{style}]{event.state.lower():9}[/] {shown(names[event.run_id])}{why}"
            )
        elif isinstance(event, ev.Alert) and event.run_id == "":
            console.print(f"[yellow]warning:[/] {shown(event.message)}")


def print_table(console: Console, rows: list[SweepRow], record: SweepRecord) -> None:
    """The sweep's final table and a summary: how many completed, which failed and why."""
    if console.is_terminal:
        table = Table(title=f"sweep {record.sweep_id}")
        for name in ("variant", "run", "state", "exit", "reason", "took", "cost"):
            table.add_column(name, no_wrap=name in ("variant", "run", "state"))
        table.add_column(record.metric or "metric")
        for row in rows:
            table.add_row(*_cells(row, row.view))
        console.print(table)
    else:  # piped: one tab-separated line per variant, as scripts read it
        for row in rows:
            cells = _cells(row, row.view, plain=True)
            print("\t".join(cells))
    done = sum(row.completed for row in rows)
    spent = sum((row.view.cost_dollars or 0.0) for row in rows if row.view)
    summary = f"{done}/{len(rows)} completed"
    if spent:
        summary += f", {money(spent)} spent"
    if (best := record.best()) is not None:
        summary += f"; best {record.metric} = {best[1]:g} ({shown(best[0])})"
    console.print(summary)
    if record.halted:
        console.print(f"[yellow]halted:[/] {shown(record.halted)}")
    failed = [row for row in rows if not row.completed]
    for row in failed:
        console.print(
            f"  [red]{row.state.lower()}[/] {shown(row.label)}: {shown(row.reason or '')}"
        )
    if failed:
        console.print(f"[dim]run them again: swjob sweep --rerun {record.sweep_id}[/]")


def _cells(row: SweepRow, view: RunView | None, plain: bool = False) -> tuple[str, ...]:
    """A variant's cells; `plain`: without markup and with the whole run id (for a pipe),
    else the short id the console shows (`swjob logs` takes it)."""
    text = visible if plain else shown
    metric = row.member.metric
    took = ""
    if view is not None and view.finished is not None:
        took = f"{(view.finished - view.created).total_seconds():.1f}s"
    run = "" if view is None else view.run_id if plain else view.run_id.rsplit("-", 1)[-1]
    state = row.state if plain else f"[{STATE_STYLE.get(row.state, 'dim')}]{row.state}[/]"
    return (
        text(row.label),
        run,
        state,
        "" if view is None or view.exit_code is None else str(view.exit_code),
        text(row.reason or ""),
        took,
        "" if view is None or view.cost_dollars is None else money(view.cost_dollars),
        f"{metric:g}" if metric is not None else text(row.member.metric_problem or ""),
    )


def print_sweep(sweep_ref: str) -> int:
    """`swjob runs --sweep ID`: the sweep's variants as its record and the run index know
    them now (a sweep still running shows its runs so far; queued ones as such)."""
    record = records.load(sweep_ref)
    if record is None:
        print(f"error: no sweep {sweep_ref!r} (or more than one sweep matches it)", file=sys.stderr)
        return 1
    store = Store()
    try:
        views = {m.run_id: store.find(m.run_id) for m in record.members if m.run_id}
    finally:
        store.close()
    held = record.halted or ("queued" if not record.done else "not started")
    rows = [
        SweepRow(m.label, m.params, views.get(m.run_id) if m.run_id else None, m, held)
        for m in record.members
    ]
    print_table(Console(highlight=False, soft_wrap=True), rows, record)
    return 0


def stop_sweep(sweep_ref: str) -> int:
    """`swjob stop --sweep ID`: ask the sweep's own process to halt (it drives the runs)."""
    record = records.load(sweep_ref)
    if record is None:
        print(f"error: no sweep {sweep_ref!r} (or more than one sweep matches it)", file=sys.stderr)
        return 1
    if record.done:
        print(f"sweep {record.sweep_id} has ended already")
        return 0
    records.request_stop(record.sweep_id)
    print(f"sweep {record.sweep_id}: stop asked; its running runs stop, no other starts")
    return 0
