"""Job detail: summary, the job's attempts, FSM timeline, transfer bars and the live log
of one run."""

from __future__ import annotations

from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Header, Static

from engine.api import RunView
from tui import history
from tui.api import Clock, EngineAPI
from tui.attempts import attempts_text, neighbour
from tui.feed import Feed
from tui.live import forwards_text
from tui.messages import RunsUpdated
from tui.owners import Owner, owner
from tui.queue import Queued, busy_by_pool, queued
from tui.summary import summary
from tui.widgets.footer import Footer
from tui.widgets.gpu_panel import GpuPanel
from tui.widgets.log_pane import LogPane
from tui.widgets.log_view import LogView
from tui.widgets.timeline import Timeline
from tui.widgets.transfers import Transfers

SPINNER_HZ = 4


def render_key(
    run: RunView, clock: Clock, waiting: Queued | None, driver: Owner | None, forwards: str = ""
) -> tuple[object, ...]:
    """What the header and bars show. The view changes with every log batch (its
    `updated` stamp), so redrawing on each tick would re-lay out the screen ~10×/s
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
        waiting,
        driver,
        second,
    )


def timeline_key(run: RunView, clock: Clock) -> tuple[object, ...]:
    """The timeline's spinner turns SPINNER_HZ times a second while the run is live; only
    the timeline is redrawn that often."""
    frame = 0 if run.finished else int(clock().timestamp() * SPINNER_HZ)
    return (run.state, run.phase, len(run.timeline), len(run.boot), frame)


class DetailScreen(Screen[None]):
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", id="swjob.detail.back"),
        Binding("l", "logs", "Logs", id="swjob.detail.logs"),
        Binding(
            "tab",
            "app.focus_next",
            "Next pane",
            show=False,
            tooltip="Move between the timeline and the log",
            id="swjob.detail.next_pane",
        ),
        Binding(
            "left_square_bracket",
            "attempt(-1)",
            "Previous attempt",
            key_display="[",
            show=False,
            id="swjob.detail.previous_attempt",
        ),
        Binding(
            "right_square_bracket",
            "attempt(1)",
            "Next attempt",
            key_display="]",
            show=False,
            id="swjob.detail.next_attempt",
        ),
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
        self._timeline_shown: tuple[object, ...] = ()
        self.chain: list[RunView] = []  # the job's attempts, oldest first (tui/attempts.py)
        self._chain_key: tuple[object, ...] = ()

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="summary")
        yield GpuPanel(id="gpus")
        yield Static(id="forwards")
        yield Static(id="attempts")
        yield Timeline(self.clock, id="timeline")
        yield Transfers(id="transfers")
        yield LogPane(self.feed.cap, id="logpane")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_run()
        run = self.engine.run(self.run_id or "")
        view = self.query_one(LogView)
        if run is not None:
            view.disk = history.log_files(run.run_dir)
            if run.live or run.run_id in self.feed.logs:
                view.attach(self.feed.log(run.run_id))
            self._load_history(run.run_dir)  # what came before this console saw the run
        view.focus()
        if self.logs_first:
            self.action_logs()

    @work(thread=True, group="history", exit_on_error=False, description="read run history")
    def _load_history(self, run_dir: Path) -> None:
        past = history.load(run_dir, self.feed.cap)
        total = history.count_lines(history.log_files(run_dir))
        self.app.call_from_thread(self._history_loaded, past, total)

    def _history_loaded(self, past: history.Past, total: int) -> None:
        """A run not driven here is shown as read back; every run's log begins at its first
        line: the lines on disk, joined to the live ones this console has."""
        live = self.engine.run(self.run_id or "")
        if past.view is not None and not (live is not None and live.live):
            self.past = past
        self.refresh_run()
        self.query_one(LogView).merge(past.lines, total)

    def refresh_run(self) -> None:
        live = self.engine.run(self.run_id or "")
        if self.past and live is not None and live.live:  # adopted since it was read
            self.past = None
            self.query_one(LogView).follow(self.feed.log(live.run_id))
        run = self.past.view if self.past else live
        if run is None:
            return
        if timeline_key(run, self.clock) != self._timeline_shown:
            self._timeline_shown = timeline_key(run, self.clock)
            self.query_one(Timeline).show(run)
        waiting = (
            queued(run, busy_by_pool(self.engine.pools(), self.engine.runs())) if run.live else None
        )
        driver = None if self.past else owner(run)
        forwards = forwards_text(self.engine.live.forwards(run.run_id))
        key = render_key(run, self.clock, waiting, driver, forwards)
        if key == self._shown:
            return
        self._shown = key
        self._refresh_attempts(run)
        self.sub_title = f"{run.job_name} · {run.run_id}"
        self.query_one("#summary", Static).update(summary(run, self.clock(), waiting, driver))
        self.query_one(GpuPanel).show(run)
        shown = self.query_one("#forwards", Static)
        shown.display = bool(forwards)
        shown.update(forwards)
        self.query_one(Transfers).show(run.transfers)
        self.query_one(LogView).set_label(f"{run.job_name} · {run.run_id} · {run.state}")

    def _refresh_attempts(self, run: RunView) -> None:
        """List the job's attempts when it took several; read again only when this one's
        state or step changes (a next attempt starts as this one ends)."""
        key = (run.state, run.phase, run.attempts)
        if key == self._chain_key:
            return
        self._chain_key = key
        if run.attempts > 1:
            runs = [r for r in self.engine.runs() if r.chain_id == run.chain_id]
            self.chain = sorted(runs, key=lambda r: r.attempt)
        shown = self.query_one("#attempts", Static)
        shown.display = len(self.chain) > 1
        shown.update(attempts_text(self.chain, run.run_id) if shown.display else "")
        self.refresh_bindings()

    def action_attempt(self, step: int) -> None:
        """Show the attempt before or after this one (the board shows only the latest)."""
        target = neighbour(self.chain, self.run_id or "", step)
        if target is not None:
            screen = DetailScreen(self.engine, self.clock, self.feed, target)
            self.app.switch_screen(screen)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "attempt":
            step = parameters[0] if parameters else 0
            return neighbour(self.chain, self.run_id or "", int(step)) is not None or None
        return True

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
