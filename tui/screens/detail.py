"""Job detail: summary, FSM timeline, transfer bars and the live log of one run."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from engine.api import RunView, cost_split, money
from tui import format as fmt
from tui import history
from tui.api import Clock, EngineAPI
from tui.feed import Feed
from tui.live import forwards_text
from tui.messages import RunsUpdated
from tui.widgets.gpu_panel import GpuPanel
from tui.widgets.log_pane import LogPane
from tui.widgets.log_view import LogView
from tui.widgets.timeline import Timeline
from tui.widgets.transfers import Transfers


def summary(run: RunView, clock: Clock) -> Text:
    end = run.finished or clock()
    text = Text.assemble(
        (run.job_name, "bold"),
        f"  {run.run_id}  ",
        fmt.state_text(run.state),
        f"  pool {run.pool}",
        f"  elapsed {fmt.duration(end - run.created)}",
        f"  exit {'—' if run.exit_code is None else run.exit_code}",
    )
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
    return text.append_text(warnings(run))


def last_sync(run: RunView) -> str:
    """When the live output sync last landed files, and which (the outputs browser has them)."""
    sync = run.last_sync
    assert sync is not None
    names = ", ".join(sync.paths[:3]) + (", …" if sync.files > 3 else "")
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
    for alert in run.alerts:
        text.append(f"\n⚠ {alert}", style="bold red")
    return text


def render_key(run: RunView, clock: Clock, forwards: str = "") -> tuple[object, ...]:
    """What the header, timeline and bars show. The view changes with every log batch
    (its `updated` stamp), so redrawing on each tick would re-lay out the screen ~10×/s
    under a flood; redrawing only when this key changes costs one redraw a second."""
    transfers = tuple((d, t.bytes_done, t.files_done, t.done) for d, t in run.transfers.items())
    second = 0 if run.finished else int(clock().timestamp())
    return (
        run.state,
        run.phase,
        len(run.timeline),
        run.node,
        transfers,
        run.cost_dollars,
        len(run.alerts),
        run.missing_outputs,
        run.last_sync,
        run.gpus[0].last_t if run.gpus else None,
        forwards,
        second,
    )


class DetailScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", id="swjob.detail.back"),
        Binding("l", "logs", "Logs", id="swjob.detail.logs"),
    ]

    def __init__(
        self, engine: EngineAPI, clock: Clock, feed: Feed, run_id: str, logs: bool = False
    ) -> None:
        super().__init__()
        self.engine, self.clock, self.feed = engine, clock, feed
        self.run_id: str | None = run_id
        self.logs_first = logs
        self.past: history.Past | None = None  # a finished run, read back from its events
        self._shown: tuple[object, ...] = ()

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="summary")
        yield GpuPanel(id="gpus")
        yield Static(id="forwards")
        yield Timeline(self.clock, id="timeline")
        yield Transfers(id="transfers")
        yield LogPane(self.feed.cap, id="logpane")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_run()
        run = self.engine.run(self.run_id or "")
        view = self.query_one(LogView)
        if run is not None and (run.live or self.run_id in self.feed.logs):
            view.attach(self.feed.log(run.run_id))
        elif run is not None:
            self._load_history(run.run_dir)
        view.focus()
        if self.logs_first:
            self.action_logs()

    @work(thread=True, group="history", exit_on_error=False, description="read run history")
    def _load_history(self, run_dir: Path) -> None:
        past = history.load(run_dir, self.feed.cap)
        self.past = past if past.view is not None else None
        self.app.call_from_thread(self.refresh_run)
        self.app.call_from_thread(self.query_one(LogView).add, past.lines)

    def refresh_run(self) -> None:
        run = self.past.view if self.past else self.engine.run(self.run_id or "")
        forwards = forwards_text(self.engine.live.forwards(self.run_id)) if run else ""
        if run is None or render_key(run, self.clock, forwards) == self._shown:
            return
        self._shown = render_key(run, self.clock, forwards)
        self.sub_title = f"{run.job_name} · {run.run_id}"
        self.query_one("#summary", Static).update(summary(run, self.clock))
        self.query_one(GpuPanel).show(run)
        shown = self.query_one("#forwards", Static)
        shown.display = bool(forwards)
        shown.update(forwards)
        self.query_one(Timeline).show(run)
        self.query_one(Transfers).show(run.transfers)

    @on(RunsUpdated)
    def _updated(self) -> None:
        """The board refreshes everything when it is shown again, so the ids can go."""
        self.feed.take_dirty()
        self.refresh_run()

    def action_logs(self) -> None:
        """Give the log the whole screen (or take it back)."""
        if self.maximized is not None:
            self.minimize()
        else:
            self.maximize(self.query_one(LogPane), container=False)
        self.query_one(LogView).focus()
