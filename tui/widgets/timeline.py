"""The job's FSM timeline: each transition with its time, time spent in the state it
entered, the spec §6 event that caused it and the commands it emitted. The row of
the step in progress is marked and its duration keeps counting.

Under the row that entered provisioning, the pools the run passed over (each with why it
had nothing for the run) and the node's boot: each step reached with how
long reaching it took and its detail (the offer, the provider's status message; a step
inferred from a later one has no time, and its detail says what proves it); the
steps a rented node never showed, on one "not seen" row (a status poll can miss a short
step: a row each was mostly noise; a local node has no offer, image or install, so it
lists none); and once the agent joined, the whole boot's time. Boot steps are drawn in
neutral colours: a step reached is not news (red and magenta read as failures)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from engine.api import RunView, Transition, boot_timeline, printable, provisioning_start
from tui import format as fmt

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


def _marker(now: datetime) -> str:
    return SPINNER[int(now.timestamp() * 10) % len(SPINNER)]


def _row(tr: Transition, until: datetime, current: bool, now: datetime) -> list[Text | str]:
    where = Text(f"{tr.to_state} · {tr.to_phase}", style=fmt.STATE_STYLES.get(tr.to_state, ""))
    if current:
        where = Text.assemble((f"{_marker(now)} ", "bold cyan"), where, (" …", "bold cyan"))
    cause = Text(tr.cause, style="bold")
    if tr.reason:
        cause.append(f" ({tr.reason})", style="red")
    return [
        fmt.clock_time(tr.ts),
        where,
        fmt.duration(until - tr.ts, tenths=True),
        cause,
        ", ".join(tr.commands) or "—",
    ]


def _boot_rows(run: RunView) -> list[list[Text | str]]:
    boot = boot_timeline(provisioning_start(run.timeline), run.boot)
    rows: list[list[Text | str]] = []
    for passed in run.pools_passed:  # pools that had nothing for it (engine/run/fallover.py)
        label = Text.assemble(("  · ", "dim"), f"pool {passed['pool']} passed")
        rows.append(["", label, "", Text(printable(passed["reason"]), style="dim"), ""])
    for step in boot.seen:
        label = Text.assemble(("  · ", "dim"), step.label)
        detail = Text(printable(step.detail or ""), style="dim")
        rows.append(
            [fmt.clock_time(step.at), label, fmt.duration(step.seconds, tenths=True), detail, ""]
        )
    local = run.node is not None and run.node.provider == "local"
    if (missing := boot.not_seen) and not local:  # one row, never a step that took 0 s
        words = ", ".join(step.label for step in missing)
        names = Text(words, style="dim", no_wrap=False, overflow="fold")  # all, over 2 lines
        rows.append(["", Text("  · not seen", style="dim"), "", names, ""])
    if boot.total_s is not None:
        booted = Text.assemble(("  · ", "dim"), ("booted", "bold"))
        rows.append(["", booted, fmt.duration(boot.total_s, tenths=True), "", ""])
    return rows


def render_timeline(run: RunView, now: datetime) -> Table:
    table = Table(expand=True, box=None, padding=(0, 1), header_style="bold dim")
    for name, ratio in (
        ("time", 0),
        ("state · step", 0),
        ("in state", 0),
        ("event", 2),
        ("commands", 2),
    ):
        table.add_column(name, no_wrap=True, overflow="ellipsis", ratio=ratio or None)
    steps = run.timeline
    first_boot = next((i for i, t in enumerate(steps) if t.to_phase == "provisioning"), -1)
    for i, tr in enumerate(steps):
        last = i == len(steps) - 1
        until = steps[i + 1].ts if not last else (run.finished or now)
        current = last and run.phase != "done" and run.finished is None
        table.add_row(*_row(tr, until, current, now), style="on grey15" if current else "")
        if tr.to_phase == "provisioning" and i == first_boot:
            for row in _boot_rows(run):
                table.add_row(*row)
    return table


class Timeline(VerticalScroll):
    """A pane of its own: `tab` focuses it and `j`/`k` scroll it. On a short terminal it
    is only a few rows high (the log gets the room), so it keeps its newest rows in view
    unless scrolled up."""

    BINDINGS = [
        Binding("j", "scroll_down", "Down", show=False, id="swjob.timeline.scroll_down"),
        Binding("k", "scroll_up", "Up", show=False, id="swjob.timeline.scroll_up"),
    ]

    def __init__(self, clock: Callable[[], datetime], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.clock = clock
        self._rows = -1

    def compose(self) -> ComposeResult:
        yield Static(id="timeline-table")

    def show(self, run: RunView) -> None:
        at_end = self.is_vertical_scroll_end
        # The spinner turns a few times a second: with the same rows the size is the same,
        # so only a repaint is needed, not a layout of the screen (a flood's log needs it).
        table = render_timeline(run, self.clock())
        rows, self._rows = self._rows, table.row_count
        self.query_one(Static).update(table, layout=rows != self._rows)
        if at_end:
            self.call_after_refresh(self.scroll_end, animate=False, immediate=True)
