"""The board: pools and their nodes on top, every job (live and history) below, and a
live preview of the selected run under the table. A job that took several attempts is
one row, its latest attempt's (tui/chains.py); the job detail lists its attempts.

The table's cursor picks the run that `s`, `o`, `l` and enter act on (and the
preview shows). Refreshes come from the app's tick (`RunsUpdated`): only the runs
the feed marked changed are redrawn. A run just submitted takes the cursor as soon
as its row exists.
"""

from __future__ import annotations

import time

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Header, Input, Static

from engine.api import RunView, all_records
from tui import prefs
from tui.api import Clock, EngineAPI
from tui.chains import ChainRows
from tui.feed import Feed
from tui.live import forwards_text
from tui.messages import OpenRun, RunsUpdated
from tui.owners import owner
from tui.queue import busy_by_pool, queued
from tui.widgets.banner import Banner
from tui.widgets.footer import Footer
from tui.widgets.jobs_table import JobsTable
from tui.widgets.pools_panel import PoolsPanel
from tui.widgets.run_preview import RunPreview
from tui.widgets.sweep_group import SweepGroup

EMPTY_HINT = (
    "No jobs yet. Press [b]n[/] to submit a job file, or start with "
    "[b]swjob-tui JOB.toml[/]. [b]?[/] lists every key."
)

NO_MATCH = "No run matches the filter. [b]esc[/] clears it."

SWEEP_SCAN_S = 2.0
"""How often the board looks for a sweep it has no group row for yet (a few small files)."""

PREVIEW_EVERY_S = 0.5
"""The preview switches runs at most this often: a held `j` moves the cursor at once and
the preview follows it twice a second. Switching reads the run's log tail and lays the
screen out again, ~10-30 ms of the loop's time; with a hundred live runs, one switch per
key held the keys behind it, and on a loaded machine, whose gaps between a held key's
moves outgrew any wait for the cursor to rest, so did one per move (tests/bench/)."""


class FilterBar(Input):
    BINDINGS = [Binding("escape", "clear", "Clear filter", show=False, id="swjob.board.clear")]

    def action_clear(self) -> None:
        self.value = ""
        self.display = False
        self.screen.query_one(JobsTable).focus()


class BoardScreen(Screen[None]):
    AUTO_FOCUS = "#jobs"
    BINDINGS = [
        Binding("enter", "open", "Detail", show=False, id="swjob.board.open"),
        Binding("l", "logs", "Logs", id="swjob.board.logs"),
        Binding("slash", "filter", "Filter", key_display="/", id="swjob.board.filter"),
        Binding(
            "x",
            "app.collect",
            "Collect orphans",
            show=False,  # the banner names x when there is something to collect
            tooltip="List nodes billing without a live run and destroy them",
            id="swjob.board.collect",
        ),
        Binding(
            "escape", "clear_filter", "Clear filter", show=False, id="swjob.board.clear_filter"
        ),
        Binding(
            "tab",
            "app.focus_next",
            "Next pane",
            show=False,
            tooltip="Move between the runs table and the preview's log",
            id="swjob.board.next_pane",
        ),
        Binding(
            "w",
            "wrap_preview",
            "Wrap preview",
            show=False,
            tooltip="Wrap the preview's long log lines (or cut them)",
            id="swjob.board.wrap_preview",
        ),
        Binding(
            "P",
            "toggle_pools",
            "Pools",
            show=False,
            tooltip="Show or hide the pools panel (remembered)",
            id="swjob.board.toggle_pools",
        ),
        Binding(
            "v",
            "toggle_preview",
            "Preview",
            show=False,
            tooltip="Show or hide the selected run's preview (remembered)",
            id="swjob.board.toggle_preview",
        ),
        Binding(
            "W",
            "app.release_warm",
            "Release warm nodes",
            show=False,  # the pools panel names w beside each warm node
            tooltip="Destroy the nodes kept warm for the next run, now",
            id="swjob.board.release_warm",
        ),
    ]

    def __init__(self, engine: EngineAPI, clock: Clock, feed: Feed) -> None:
        super().__init__()
        self.engine, self.clock, self.feed = engine, clock, feed
        self.to_select: str | None = None  # a submitted run whose row is not there yet
        self._followed: set[str] = set()  # unfinished runs another process drives (or none)
        self._busy: dict[str, tuple[int, int]] = {}
        self._caps: dict[str, float] = {}  # each pool's cost cap for a run
        self.chains = ChainRows()
        # the board's own widgets, kept: it redraws them ten times a second, and a query
        # walks the screen's whole tree (~0.4 ms each, a dozen per tick)
        self._pools = PoolsPanel(clock, id="pools")
        self._banner = Banner(id="banner")
        self._bar = FilterBar(placeholder="filter runs by name, id, state or pool (esc clears)")
        self._table = JobsTable(clock, id="jobs")
        self._hint = Static("", id="empty")
        self._preview = RunPreview(clock, feed, id="run-preview")
        self._sweeps = Vertical(id="sweeps")
        self._groups: dict[str, SweepGroup] = {}
        self._switched_at = 0.0  # when the preview last switched runs (monotonic)
        self._second = -1  # the second (monotonic) whose tick redrew every live run's row
        self.prefs = prefs.load()

    def compose(self) -> ComposeResult:
        yield Header()
        yield self._pools
        yield self._banner
        yield self._sweeps
        self._bar.display = False
        yield self._bar
        yield self._table
        self._hint.display = False
        yield self._hint
        yield self._preview
        yield Footer()

    @property
    def run_id(self) -> str | None:
        """The run the board's actions apply to: the one under the cursor (None before the
        table is mounted: the app asks on every tick)."""
        return self._table.selected if self._table.is_attached else None

    def on_mount(self) -> None:
        self._pools.display = self.prefs.pools
        self.set_class(not self.prefs.preview, "-no-preview")
        self.refresh_all()
        self.set_interval(SWEEP_SCAN_S, self._refresh_sweeps)
        self._table.focus()

    def action_toggle_pools(self) -> None:
        self.prefs.pools = not self.prefs.pools
        self._pools.display = self.prefs.pools
        self._remember()

    def action_wrap_preview(self) -> None:
        self._preview.view.action_toggle_wrap()

    def action_toggle_preview(self) -> None:
        self.prefs.preview = not self.prefs.preview
        self.set_class(not self.prefs.preview, "-no-preview")
        self._refresh_selection()
        self._remember()

    def _remember(self) -> None:
        saved = prefs.Prefs(**vars(self.prefs))
        self.run_worker(lambda: prefs.save(saved), thread=True, group="prefs")

    def on_screen_resume(self) -> None:
        self.refresh_all()

    def _term(self) -> str:
        return self._bar.value.strip().lower()

    def _matches(self, run: RunView) -> bool:
        term = self._term()
        return not term or any(
            term in s.lower() for s in (run.job_name, run.run_id, run.chain_id, run.state, run.pool)
        )

    def _rows(self, runs: list[RunView]) -> list[RunView]:
        """The runs that are rows: each job's latest attempt, if the filter lets it."""
        self.chains.see(runs)
        return [r for r in runs if self.chains.is_latest(r) and self._matches(r)]

    def refresh_all(self) -> None:
        self._refresh_filter_title()
        self._refresh_sweeps()
        everything = self.engine.runs()
        runs = self._rows(everything)
        self._redraw(runs, everything, keep={r.run_id for r in runs})

    def _refresh_sweeps(self) -> None:
        """A collapsed group row (tui/widgets/sweep_group.py) for each sweep on record with
        runs this console knows, newest first; each group reads its own record and runs."""
        if not self._sweeps.is_attached:
            return
        for record in reversed(all_records()):  # oldest first, each new one on top
            if record.sweep_id in self._groups:
                continue
            if not any(m.run_id and self.engine.run(m.run_id) for m in record.members):
                continue
            group = SweepGroup(self.engine, record.sweep_id, collapsed=True)
            self._groups[record.sweep_id] = group
            self._sweeps.mount(group, before=0 if self._sweeps.children else None)

    def _redraw(
        self, runs: list[RunView], everything: list[RunView], keep: set[str] | None = None
    ) -> None:
        """Redraw these runs' rows (dropping rows not in `keep`, when given), the pools,
        the banner (from `everything`), the hint and the preview of the selected run."""
        table = self._table
        with self.app.batch_update():
            self._refresh_pools(everything)
            if keep is not None:
                table.keep_only(keep)
            replaced = self.chains.replaced()  # a next attempt takes its job's row
            if table.selected in replaced:
                self.to_select = replaced[table.selected]
            table.drop(set(replaced))
            costs = {r.run_id: self.chains.cost(r) for r in runs if r.attempts > 1}
            table.upsert(runs, self._marks(runs), costs, self._caps)
            self._refresh_selection()
            self._refresh_hint()

    def _marks(self, runs: list[RunView]) -> dict[str, str]:
        """What the step column says instead of the step: queued, or who drives the run.
        Runs this console does not drive send it no events, so they are re-checked on
        every tick (a lock probe each) until they have finished: one whose verdict is in
        is still tearing its node down, and its row would stop at "teardown"."""
        marks: dict[str, str] = {}
        for run in runs:
            if run.live or run.finished is not None:
                self._followed.discard(run.run_id)
            else:
                self._followed.add(run.run_id)
            driver = owner(run)
            if driver is not None:
                marks[run.run_id] = driver.value
            elif queued(run, self._busy):
                marks[run.run_id] = "queued"
        return marks

    def select_run(self, run_id: str) -> None:
        """Move the cursor to this run, now or as soon as its row appears."""
        self.to_select = run_id
        self._refresh_selection()

    def _refresh_selection(self) -> None:
        table = self._table
        if self.to_select is not None and table.select(self.to_select):
            self.to_select = None
        if self._preview.run_id != self.run_id:
            if time.monotonic() - self._switched_at < PREVIEW_EVERY_S:
                return  # a later tick switches it
            self._switched_at = time.monotonic()
        run = self.engine.run(self.run_id) if self.run_id and self.prefs.preview else None
        if run is None:
            self._preview.show(None)
        else:
            forwards = forwards_text(self.engine.live.forwards(run.run_id)) if run.live else ""
            self._preview.show(run, queued(run, self._busy), owner(run), forwards)
            self._preview.collapse_if_silent()

    def _refresh_pools(self, everything: list[RunView]) -> None:
        """Pools and the warning banner: a few lines, each redrawn only when what it
        shows changed."""
        pools = self.engine.pools()
        self._busy = busy_by_pool(pools, everything)
        self._caps = {p.name: p.max_dollars for p in pools if p.max_dollars is not None}
        self._pools.show(pools)
        self._banner.show(everything, self.feed.orphans)

    def _refresh_hint(self) -> None:
        """An empty table says how to fill it (or that the filter hides everything)."""
        hint, table = self._hint, self._table
        text = "" if table.row_count else EMPTY_HINT
        if text and self._term():
            text = NO_MATCH
        if str(hint.content) != text:
            hint.update(text)
            hint.display = bool(text)
            table.set_class(bool(text), "-empty")

    @on(RunsUpdated)
    def refresh_runs(self) -> None:
        """Update only the changed runs' rows; elapsed times of live runs tick too, on the
        first tick of each second: a hundred runs' clocks, each turning over at its own
        moment, made every tick redraw rows and repaint the screen (ten a second). Runs
        other processes drive send no events: every unfinished one is redrawn from the
        index, so one started in another terminal gets its row, and so is each followed
        one last seen unfinished (it may have finished since)."""
        everything = self.engine.runs()
        ids = set(self.feed.take_dirty())
        second = int(time.monotonic())
        if second != self._second:  # the live runs' clocks, once a second and all at once
            self._second = second
            ids |= {r.run_id for r in self.engine.running()}
        ids |= self._followed | {r.run_id for r in everything if not r.live and not r.finished}
        self._redraw(self._rows([r for r in everything if r.run_id in ids]), everything)

    @on(DataTable.RowHighlighted)
    def _row_highlighted(self) -> None:
        self._refresh_selection()

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            self.post_message(OpenRun(event.row_key.value))

    def action_open(self) -> None:
        if self.run_id:
            self.post_message(OpenRun(self.run_id))

    def action_logs(self) -> None:
        if self.run_id:
            self.post_message(OpenRun(self.run_id, logs=True))

    def action_filter(self) -> None:
        bar = self._bar
        bar.display = True
        bar.focus()

    def action_clear_filter(self) -> None:
        self._bar.action_clear()
        self.refresh_all()

    @on(Input.Changed)
    def _filter_changed(self) -> None:
        self.refresh_all()

    @on(Input.Submitted)
    def _filter_done(self) -> None:
        """Enter keeps the filter and closes its bar: the table's title says what it
        filters by (esc clears it)."""
        self._bar.display = False
        self._table.focus()

    def _refresh_filter_title(self) -> None:
        term = self._term()
        title = f"filter: {term} · esc clears" if term else ""
        if self._table.border_title != title:
            self._table.border_title = title

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("open", "logs"):
            return self.run_id is not None or None
        if action == "wrap_preview":
            return self._preview.display or None
        return True
