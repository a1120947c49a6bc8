"""The board's preview of the selected run (lazydocker's side panel): its state and step,
cost so far, why it failed, and the last lines of its log, live.

A live run's lines come from the feed's ring, as in the job detail; a past run's are
the tail of its log files, read in a thread when it is selected. The `#gpu` cell shows
the busiest GPU's recent utilisation as a sparkline; "GPU —" while the run sends none.
"""

from __future__ import annotations

from pathlib import Path

from rich.cells import cell_len
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from engine.api import RunView
from tui import history
from tui.api import Clock
from tui.feed import Feed, Line
from tui.owners import Owner
from tui.queue import Queued
from tui.summary import summary
from tui.widgets.gpu_panel import row_sparkline
from tui.widgets.log_pane import LogPane
from tui.widgets.log_view import LogView

PREVIEW_LINES = 200
NO_GPU = "GPU —"


class RunPreview(Vertical):
    def __init__(self, clock: Clock, feed: Feed, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.clock, self.feed = clock, feed
        self.run_id: str | None = None
        self._shown: tuple[object, ...] = ()
        self._shape: tuple[int, bool] = (0, False)  # the summary's lines, and all fit a row
        self._silent: bool | None = None  # whether the log box is folded away
        self._view: LogView | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="preview-head"):
            yield Static(id="preview-summary")
            yield Static(NO_GPU, id="gpu")
        yield LogPane(PREVIEW_LINES, id="preview-log")

    @property
    def view(self) -> LogView:
        """The preview's log (kept: asked on every tick, and a query walks the tree)."""
        if self._view is None or not self._view.is_attached:
            self._view = self.query_one(LogView)
        return self._view

    def show(
        self,
        run: RunView | None,
        queued: Queued | None = None,
        owner: Owner | None = None,
        forwards: str = "",
    ) -> None:
        """Show this run (None: nothing is selected); cheap when nothing changed.
        `forwards`: its forwarded ports, one line each (they were only in the detail)."""
        self.display = run is not None
        if run is None:
            self.run_id = None
            return
        if run.run_id != self.run_id:
            self._switch(run)
        elif run.live:  # adopted since it was selected: its new lines come from the feed
            self.view.follow(self.feed.log(run.run_id))
        now = self.clock()
        key = (run, queued, owner, forwards, 0 if run.finished else int(now.timestamp()))
        if key == self._shown:
            return
        self._shown = key
        text = summary(run, now, queued, owner)
        text.append(f"\n{forwards}" if forwards else "", style="cyan")
        head = self.query_one("#preview-summary", Static)
        # its height changes with its count of lines, or with a line too long for a row:
        # only then the whole screen is laid out again (not for each second it ticks)
        lines = text.plain.split("\n")
        shape = (len(lines), all(cell_len(line) <= head.content_size.width for line in lines))
        head.update(text, layout=shape != self._shape or not shape[1])
        self._shape = shape
        spark = row_sparkline(run)  # a line that fits its fixed width: never laid out again
        self.query_one("#gpu", Static).update(f"GPU {spark}" if spark else NO_GPU, layout=False)
        self.view.set_label(run.job_name)

    def collapse_if_silent(self) -> None:
        """The log box shows only once the run has a line: a silent job's preview is
        its summary, and the table keeps the rows (asked on every tick: cheap). Folded
        by the preview's own styles, not by a class: a class toggled restyled the
        preview's every widget against the stylesheet, ~5 ms of the loop's CPU each time
        the cursor moved between a silent run and one with lines."""
        silent = not self.view.line_count
        if silent == self._silent:
            return
        self._silent = silent
        self.query_one(LogPane).display = not silent
        self.styles.height = "auto" if silent else None  # None: the stylesheet's

    def _switch(self, run: RunView) -> None:
        self.run_id = run.run_id
        view = self.view
        view.disk = history.log_files(run.run_dir)
        if run.live or run.run_id in self.feed.logs:
            view.attach(self.feed.log(run.run_id))
        else:
            view.attach(None)
        self._load_tail(run.run_id, run.run_dir)  # lines from before this console saw it

    @work(thread=True, exclusive=True, group="preview", exit_on_error=False)
    def _load_tail(self, run_id: str, run_dir: Path) -> None:
        lines = history.tail(run_dir, PREVIEW_LINES)
        total = history.count_lines(history.log_files(run_dir))
        self.app.call_from_thread(self._tail_loaded, run_id, lines, total)

    def _tail_loaded(self, run_id: str, lines: list[Line], total: int) -> None:
        if run_id == self.run_id:  # the cursor may have moved on meanwhile
            self.view.merge(lines, total)
            self.collapse_if_silent()  # now: no board tick comes while a dialog covers it
