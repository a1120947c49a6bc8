"""The board's jobs table: one row per run, keyed by run id, updated cell by cell.

Rows are never rebuilt on a change: a tick updates only the cells of the runs that
changed (dolphie's process list does the same), so the cursor and scroll stay put.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, RowDoesNotExist

from engine.api import RunView, money
from tui import format as fmt
from tui.widgets.gpu_panel import row_sparkline

COLUMNS = (
    ("name", "job", 22),
    ("id", "run id", 24),  # YYYYmmdd-HHMMSS-xxxxxxxx, whole: it is what `swjob` commands take
    ("state", "state", 10),
    ("step", "step", 13),
    ("node", "node", 18),
    ("elapsed", "elapsed", 7),
    ("exit", "exit", 4),
    ("cost", "cost", 7),
)
ALERT_MARK = "⚠ "


def cells(run: RunView, now: datetime) -> dict[str, str | Text]:
    end = run.finished or now
    node = fmt.short_node_id(run.node) if run.node else "—"
    step = "done" if run.terminal and run.phase == "done" else run.phase
    if spark := row_sparkline(run):  # the GPU's recent utilisation, while it runs
        step = f"{step} {spark}"
    name: str | Text = run.job_name
    if run.alerts:  # a node that may still bill: the row says so, the banner says what
        name = Text.assemble((ALERT_MARK, "bold red"), run.job_name)
    return {
        "name": name,
        "id": run.run_id,
        "state": fmt.state_text(run.state),
        "step": step,
        "node": node,
        "elapsed": fmt.duration(end - run.created),
        "exit": "—" if run.exit_code is None else str(run.exit_code),
        "cost": money(run.cost_dollars),
    }


class JobsTable(DataTable[str | Text]):
    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, id="swjob.jobs_table.cursor_down"),
        Binding("k", "cursor_up", "Up", show=False, id="swjob.jobs_table.cursor_up"),
        Binding("g", "scroll_top", "Top", show=False, id="swjob.jobs_table.scroll_top"),
        Binding("G", "scroll_bottom", "Bottom", show=False, id="swjob.jobs_table.scroll_bottom"),
    ]

    def __init__(self, clock: Callable[[], datetime], **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.clock = clock
        self._created: dict[str, datetime] = {}
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    def upsert(self, runs: list[RunView]) -> None:
        """Update the rows of these runs; add new ones and keep newest first."""
        now, added = self.clock(), False
        for run in runs:
            row = cells(run, now)
            if run.run_id in self._created:
                for column, value in row.items():
                    self._set(run.run_id, column, value)
            else:
                self._created[run.run_id] = run.created
                self.add_row(*row.values(), key=run.run_id)
                added = True
        if added:
            self._resort()

    def _resort(self) -> None:
        """Newest first, with the cursor kept on the run it was on."""
        selected = self.selected
        self.sort("id", key=lambda rid: self._created[str(rid)], reverse=True)
        if selected is not None:
            self.move_cursor(row=self.get_row_index(selected), animate=False)

    def _set(self, run_id: str, column: str, value: str | Text) -> None:
        try:
            if self.get_cell(run_id, column) != value:
                self.update_cell(run_id, column, value)
        except (CellDoesNotExist, RowDoesNotExist):
            pass

    def keep_only(self, run_ids: set[str]) -> None:
        """Drop rows not in `run_ids` (the board's filter)."""
        for run_id in [rid for rid in self._created if rid not in run_ids]:
            del self._created[run_id]
            self.remove_row(run_id)

    @property
    def selected(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        except CellDoesNotExist:
            return None
        return key.value
