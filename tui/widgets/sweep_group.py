"""One sweep on the board: a collapsible group row (progress, cost against its cap, best
metric) over its runs, one row each as the board shows them; `s` stops the whole group.

Self-contained: it reads the sweep's record and its runs through the engine's API every
`REFRESH_S`, so the board only mounts one per sweep (`engine.api.all_records`).
"""

from __future__ import annotations

from datetime import UTC, datetime

from textual.binding import Binding
from textual.widgets import Collapsible, DataTable

from engine.api import RunView, SubmitError, SweepRecord, load_sweep, request_stop
from tui.api import EngineAPI
from tui.sweeps import summarize
from tui.widgets.jobs_table import COLUMNS, cells

REFRESH_S = 0.5


class SweepGroup(Collapsible):
    BINDINGS = [Binding("s", "stop_group", "stop the sweep", id="swjob.sweep_group.stop")]

    def __init__(self, engine: EngineAPI, sweep_id: str, *, collapsed: bool = False) -> None:
        table: DataTable[str] = DataTable(cursor_type="row")
        for key, label, width in COLUMNS:
            table.add_column(label, key=key, width=width)
        super().__init__(
            table, title=f"sweep {sweep_id}", collapsed=collapsed, id=f"sweep-{sweep_id}"
        )
        self.engine, self.sweep_id, self.table = engine, sweep_id, table
        self.record: SweepRecord | None = None

    def on_mount(self) -> None:
        self.reload()
        self.set_interval(REFRESH_S, self.reload)

    def _views(self, record: SweepRecord) -> dict[str, RunView]:
        found = (self.engine.run(m.run_id) for m in record.members if m.run_id)
        return {view.run_id: view for view in found if view is not None}

    def reload(self) -> None:
        """Read the record and the runs again; update the group row and each run's row."""
        record = load_sweep(self.sweep_id)
        if record is None:
            return
        self.record = record
        views = self._views(record)
        self.title = summarize(record, views).line(record)
        table = self.table
        now = datetime.now(UTC)
        for member in record.members:
            view = views.get(member.run_id or "")
            if view is None:
                continue
            # cells() also fills a wide board's columns (pool, price, …): the group's
            # table has the standard ones only
            row = cells(view, now) | {"name": member.label}
            shown = [(key, row.get(key, "")) for key, _, _ in COLUMNS]
            if view.run_id not in table.rows:
                table.add_row(*(value for _, value in shown), key=view.run_id)
                continue
            for key, value in shown:
                table.update_cell(view.run_id, key, value)

    async def action_stop_group(self) -> None:
        """Halt the sweep: its process stops its runs and starts no other; the runs this
        console's engine drives (adopted from a sweep whose process died) stop here."""
        request_stop(self.sweep_id)
        for member in self.record.members if self.record else []:
            view = self.engine.run(member.run_id) if member.run_id else None
            if view is not None and view.live and view.stoppable:
                try:
                    await self.engine.stop(view.run_id)
                except SubmitError:  # ended, or tearing down already
                    continue
        self.notify(f"sweep {self.sweep_id}: stopping")
