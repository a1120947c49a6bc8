"""`swjob runs` and `swjob logs`: history read from the run index and the landing dirs.

On a terminal `swjob runs` shows one entry per job: a job that took several attempts
(engine/report/chains.py) is one row — its latest attempt's state, `2/3`, the cost of
all attempts — with each attempt indented beneath it; an unfinished run that no live
process drives says so, with the command that takes it over. Piped, it prints one line
per run, as scripts read it."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from engine.cli.lookup import find_run, no_such_run
from engine.cli.render import STATE_STYLE, shown
from engine.report.chains import chains
from engine.report.money import money
from engine.report.printable import visible
from engine.report.views import RunView
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
    table = Table("run", "job", "pool", "state", "attempt", "exit", "started", "took", "cost",
                  "reason")  # fmt: skip
    for chain in chains(views):
        first, latest = chain.attempts[0], chain.latest
        cells = _cells(latest, chain.cost_dollars, first.created, first.job_name)
        if _unowned(latest):
            cells = (*cells[:-1], f"[bold yellow]nobody drives it: swjob attach {latest.run_id}[/]")
        table.add_row(first.run_id, *cells)
        if len(chain.attempts) > 1:
            for attempt in chain.attempts:
                table.add_row(f"  └ {attempt.run_id}", *_cells(attempt, attempt.cost_dollars))
    console.print(table)


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
        shown(v.reason or ""),
    )


def print_logs(run_ref: str, step: str) -> int:
    view = find_run(run_ref)
    if view is None:
        print(f"error: {no_such_run(run_ref)}", file=sys.stderr)
        return 1
    steps = ["setup", "run"] if step == "all" else [step]
    for name in steps:
        path = view.run_dir / "logs" / f"{name}.log"
        if not path.exists():
            continue
        _copy_log(path)
    sys.stdout.flush()
    return 0


def _copy_log(path: Path) -> None:
    """The log as written, byte for byte, into a pipe or file; on a terminal each line
    with its control characters drawn visible (a job's escapes must not drive it)."""
    with path.open("rb") as handle:
        if not sys.stdout.isatty():
            while chunk := handle.read(1 << 16):
                sys.stdout.buffer.write(chunk)
            return
        for raw in handle:
            line = raw.decode("utf-8", "replace")
            end = "\n" if line.endswith("\n") else ""
            # a progress update's lone CR (agent/lines.py) ends its line, as its newline does
            sys.stdout.write(visible(line.removesuffix("\n").removesuffix("\r")) + end)
