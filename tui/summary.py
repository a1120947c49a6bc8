"""A run in a few lines: what the job detail shows on top and the board's preview shows
for the selected row — one function, so both say the same thing the same way.

Why it failed and what leaked come right under the state line: at 80×24 both panes keep
only their first lines, and the node's offer alone wraps to two there."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text

from engine.api import RunView, cost_split, money, outputs_where
from tui import format as fmt
from tui.owners import Owner
from tui.queue import Queued


def step_text(run: RunView, queued: Queued | None) -> str:
    if queued is not None:
        return "queued"
    return "done" if run.terminal and run.phase == "done" else run.phase


def summary(
    run: RunView, now: datetime, queued: Queued | None = None, owner: Owner | None = None
) -> Text:
    end = run.finished or now
    text = Text.assemble(
        (run.job_name, "bold"),
        f"  {run.run_id}  ",
        fmt.state_text(run.state),
        f" · {step_text(run, queued)}",
        f"  pool {run.pool}",
        f"  attempt {run.attempt}/{run.attempts}" if run.attempts > 1 else "",
        f"  elapsed {fmt.duration(end - run.created)}",
        f"  {fmt.why(run)}" if fmt.why(run) != "—" else "",
    )
    text.append_text(warnings(run))  # first: a short pane clips the last lines
    if queued is not None:
        text.append(f"\n{queued.describe(now)}: no node is rented yet", style="yellow")
    if owner is not None:
        text.append(f"\n{owner.describe()}", style="bold yellow")
    if run.node is not None:
        offer = fmt.offer_summary(run.node) or fmt.price(run.node.price_per_hour)
        text.append(f"\nnode {run.node.node_id}  ")
        text.append_text(fmt.node_state_text(run.node.state.value))
        text.append(f"  {offer}" if offer else "", style="dim")
    if run.cost_dollars is not None:
        text.append(f"\ncost {money(run.cost_dollars)}", style="bold")
        order = [tr.to_phase for tr in run.timeline]
        split = cost_split(run.cost_by_phase, order)
        text.append(f"  ({split})" if split else "", style="dim")
    if run.last_sync is not None:
        text.append("\n" + last_sync(run))
    if run.sink:
        text.append(f"\noutputs: {outputs_where(run)} · {run.sink}", style="dim")
    return text


def last_sync(run: RunView) -> str:
    """When the live output sync last landed files, and which (the outputs browser has them)."""
    sync = run.last_sync
    assert sync is not None
    names = ", ".join(sync.paths[:3]) + (", …" if sync.files > 3 else "")
    if sync.sink:  # the node put them in the sink: no names travel back
        return fmt.one_line(
            f"last sync to the sink {fmt.clock_time(sync.ts)}: {sync.files} file(s), "
            f"{fmt.size(sync.bytes)}; {sync.held} output(s) held there"
        )
    return fmt.one_line(
        f"last sync {fmt.clock_time(sync.ts)}: {sync.files} file(s), {fmt.size(sync.bytes)}"
        f" ({names}); {sync.held} output(s) held"
    )


def warnings(run: RunView) -> Text:
    """The lines an operator must not miss: why it failed, what is missing, what leaked."""
    text = Text()
    if run.state == "FAILED" and run.reason:
        text.append(f"\nFAILED: {run.reason}", style="bold red")
    if run.missing_outputs:
        text.append(f"\nmissing outputs: {', '.join(run.missing_outputs)}", style="yellow")
    if run.outputs_note:
        text.append(f"\n{run.outputs_note}", style="yellow")
    for alert in run.alerts:
        text.append(f"\n⚠ {alert}", style="bold red")
    return text
