"""`swjob runs` and `swjob logs`: history read from the run index and the landing dirs.

On a terminal `swjob runs` shows one entry per job: a job that took several attempts
(engine/report/chains.py) is one row — its latest attempt's state, `2/3`, the cost of
all attempts — with each attempt indented beneath it; an unfinished run that no live
process drives says so, with the command that takes it over. Piped, it prints one line
per run, as scripts read it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime

from rich.console import Console
from rich.table import Column, Table

from engine.cli.lookup import find_run, no_such_run
from engine.cli.render import STATE_STYLE, shown
from engine.report.chains import chains
from engine.report.money import money
from engine.report.printable import visible
from engine.report.views import RunView, short_id
from engine.report.where import outputs_where
from engine.state import ownership
from engine.state.store import Store


def _elapsed(view: RunView, since: datetime | None = None) -> str:
    end = view.finished or view.updated
    seconds = max(0, int((end - (since or view.created)).total_seconds()))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _when(ts: datetime) -> str:
    return ts.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def print_runs(console: Console, limit: int) -> None:
    store = Store()
    try:
        views = store.views(limit)
    finally:
        store.close()
    if not console.is_terminal:
        for v in views:
            code = "" if v.exit_code is None else str(v.exit_code)
            print(f"{v.run_id}\t{v.job_name}\t{v.pool}\t{v.state}\t{code}\t{v.run_dir}")
        return
    shown_id = _id_shown(console.width)
    table = Table(
        "job", "pool", "state", "attempt", "exit", "started", "took", "cost", "outputs", "reason"
    )
    width = max((len(shown_id(v.run_id)) for v in views), default=0) + len("  └ ")
    table.columns.insert(0, Column("run", no_wrap=True, min_width=width))
    for chain in chains(views):
        first, latest = chain.attempts[0], chain.latest
        cells = _cells(latest, chain.cost_dollars, first.created, first.job_name)
        if _unowned(latest):
            hint = f"nobody drives it: swjob attach {shown_id(latest.run_id)}"
            cells = (*cells[:-1], f"[bold yellow]{hint}[/]")
        table.add_row(shown_id(first.run_id), *cells)
        if len(chain.attempts) > 1:
            for attempt in chain.attempts:
                table.add_row(
                    f"  └ {shown_id(attempt.run_id)}", *_cells(attempt, attempt.cost_dollars)
                )
    console.print(table)


WHOLE_IDS_FROM = 150
"""Terminal columns from which `swjob runs` shows whole run ids; below, their short ids
(unique too, and what the console shows): an id is never cut to a start others share."""


def _id_shown(width: int) -> Callable[[str], str]:
    return (lambda run_id: run_id) if width >= WHOLE_IDS_FROM else short_id


def _unowned(view: RunView) -> bool:
    """An unfinished run no live process holds: its node may be billing with nobody
    watching (the owner was killed, or left it running) until someone attaches."""
    return view.finished is None and not ownership.has_live_owner(view.run_id)


def _cells(
    v: RunView, cost: float | None, since: datetime | None = None, job: str = ""
) -> tuple[str, ...]:
    """A row after its run id: a chain's (its `job` named, timed from `since`, the chain's
    `cost`) or one attempt's beneath it."""
    style = STATE_STYLE.get(v.state, "")
    return (
        job,
        v.pool if job else "",
        f"[{style}]{v.state}[/]",
        f"{v.attempt}/{v.attempts}" if v.attempts > 1 else "",
        "" if v.exit_code is None else str(v.exit_code),
        _when(since or v.created),
        _elapsed(v, since),
        "" if cost is None else money(cost),
        outputs_where(v),
        shown(v.reason or ""),
    )


def print_logs(run_ref: str, step: str, follow: bool = False) -> int:
    view = find_run(run_ref)
    if view is None:
        print(f"error: {no_such_run(run_ref)}", file=sys.stderr)
        return 1
    steps = ["setup", "run"] if step == "all" else [step]
    if follow:
        return _follow_logs(view, steps)
    for name in steps:
        path = view.run_dir / "logs" / f"{name}.log"
        if not path.exists():
            continue
        with path.open("rb") as handle:  # on a terminal line by line, drawn visible
            pieces = (
                iter(handle) if sys.stdout.isatty() else iter(lambda: handle.read(1 << 16), b"")
            )
            for piece in pieces:
                _write(piece)
    sys.stdout.flush()
    return 0


def _follow_logs(view: RunView, steps: list[str]) -> int:
    """`swjob logs -f`: to the run's end (exit 0), or until nobody drives it (exit 1)."""
    import asyncio

    from engine.ops.logs import Unowned, follow_log

    async def copy() -> None:
        async for piece in follow_log(view, steps):
            _write(piece)
            sys.stdout.flush()

    try:
        asyncio.run(copy())
    except Unowned as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def _write(data: bytes) -> None:
    """A log's bytes as written, into a pipe or file; on a terminal each line with its
    control characters drawn visible (a job's escapes must not drive it)."""
    if not sys.stdout.isatty():
        sys.stdout.buffer.write(data)
        return
    for line in data.decode("utf-8", "replace").splitlines(keepends=True):
        end = "\n" if line.endswith("\n") else ""
        # a progress update's lone CR (agent/lines.py) ends its line, as its newline does
        sys.stdout.write(visible(line.removesuffix("\n").removesuffix("\r")) + end)
