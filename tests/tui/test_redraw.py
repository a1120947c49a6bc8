"""The board draws again only what changed: with 12 runs starting at once its table drew
all ~150 cells on every change, the pools panel drew its whole table twice (once to
measure it), and the preview laid the whole screen out each second: 20-50 ms a frame on
the console's loop (tests/bench/teardown_stall.py)."""

from __future__ import annotations

from collections.abc import Hashable
from datetime import UTC, datetime, timedelta

from rich.console import Console
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.cache import LRUCache
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable, Static

from engine.report.events import NodeState
from engine.report.views import NodeView, PoolView, RunView
from tests.tui.conftest import RECORDED, booted, many_runs, until, with_history
from tui import format as fmt
from tui.app import SwjobApp
from tui.feed import Feed
from tui.screens import board
from tui.widgets import jobs_table
from tui.widgets.jobs_table import JobsTable
from tui.widgets.pools_panel import (
    BOARD_LINES,
    MAX_LINES,
    PoolLines,
    PoolsPanel,
    column_widths,
    grid,
    pool_rows,
    reserved,
)
from tui.widgets.run_preview import RunPreview

NOW = datetime(2026, 12, 6, 22, 0, tzinfo=UTC)


class Board(App[None]):
    def compose(self) -> ComposeResult:
        yield JobsTable(lambda: NOW, id="jobs")
        yield PoolsPanel(lambda: NOW, id="pools")


class TableBoard(App[None]):
    def compose(self) -> ComposeResult:
        yield JobsTable(lambda: NOW, id="jobs")


def segments(table: JobsTable) -> list[list[tuple[str, object, object]]]:
    """The table's lines as drawn: text, style and click target of each segment."""
    lines = table.render_lines(Region(0, 0, *table.size))
    return [[(s.text, s.style, s.style and s.style.meta) for s in line] for line in lines]


def drawn(table: JobsTable) -> list[str]:
    strips: list[Strip] = table.render_lines(Region(0, 0, *table.size))
    return [strip.text for strip in strips]


async def test_a_changed_cell_is_the_only_one_drawn_again(monkeypatch) -> None:
    cells: list[tuple[int, int]] = []
    draw = JobsTable._draw

    def counted(self, value, at):  # type: ignore[no-untyped-def]
        cells.append((at.row, at.column))
        return draw(self, value, at)

    monkeypatch.setattr(JobsTable, "_draw", counted)
    app = Board()
    async with app.run_test(size=(130, 30)) as pilot:
        table = app.query_one(JobsTable)
        for row in range(12):
            keys = [key for key, _, _ in table.layout_columns]
            table.add_row(*(Text(f"{key}-{row}") for key in keys), key=f"run-{row}")
        await pilot.pause()
        before = drawn(table)
        cells.clear()
        assert drawn(table) == before and not cells  # nothing changed: nothing drawn
        table.update_cell("run-3", "elapsed", Text("12m05s"))
        after = drawn(table)
        assert cells == [(3, table.get_column_index("elapsed"))]
        changed = [i for i, (old, new) in enumerate(zip(before, after, strict=True)) if old != new]
        assert changed == [1 + 3] and "12m05s" in after[4]  # below the header
        table.move_cursor(row=5)
        cells.clear()
        drawn(table)
        assert {row for row, _ in cells} == {0, 5}  # the rows the cursor left and reached


def node(i: int) -> NodeView:
    since = NOW - timedelta(minutes=i)
    return NodeView(
        provider="local", node_id=f"n{i}", pool="local", run_id=None, state=NodeState.READY,
        since=since,
    )  # fmt: skip


async def test_the_pools_panel_draws_only_the_lines_it_shows_and_is_not_measured(
    monkeypatch,
) -> None:
    measured: list[int] = []
    measure = PoolsPanel.get_content_height

    def counted(self, *args):  # type: ignore[no-untyped-def]
        measured.append(1)
        return measure(self, *args)

    monkeypatch.setattr(PoolsPanel, "get_content_height", counted)
    pool = PoolView(name="local", provider="local", max_nodes=20, summary="this machine")
    many = pool.model_copy(update={"nodes": [node(i) for i in range(20)]})
    table = whole_table([many])
    assert table.row_count == MAX_LINES
    last = list(table.columns[0].cells)[-1]
    assert isinstance(last, Text) and last.plain.strip() == f"… {21 - MAX_LINES + 1} more"
    assert whole_table([pool]).row_count == 1
    app = Board()
    async with app.run_test(size=(130, 40)) as pilot:
        panel = app.query_one(PoolsPanel)
        await pilot.pause()
        measured.clear()  # its first layout, empty, before it shows anything
        panel.show([many])
        await pilot.pause()
        assert panel.styles.height is not None and panel.styles.height.value == MAX_LINES
        assert panel.size.height == MAX_LINES
        await pilot.resize_terminal(80, 24)  # what the rest of the board leaves it
        panel.show([many])
        await pilot.pause()
        assert panel.size.height == 24 - BOARD_LINES
        panel.show([pool])
        await pilot.pause()
        assert panel.size.height == 1
        assert not measured


async def test_nodes_coming_one_by_one_lay_the_screen_out_in_steps(monkeypatch) -> None:
    """Each change of the panel's height lays out the whole screen again (10-25 ms of the
    loop's CPU while 12 runs start): a line a node was 12 layouts up and 12 down. Its
    height goes by powers of two, up to its cap: 1, 2, 4, 8 — three layouts each way."""
    assert [reserved(rows, MAX_LINES) for rows in range(1, 14)] == [1, 2, 4, 4] + [8] * 9
    assert reserved(3, 3) == 3  # the cap (80×24's room) holds
    layouts: list[int] = []
    real = Screen._refresh_layout

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if self._layout_required:
            layouts.append(self.query_one(PoolsPanel).styles.height.value)
        real(self, *args, **kwargs)

    pool = PoolView(name="local", provider="local", max_nodes=20, summary="this machine")
    app = Board()
    async with app.run_test(size=(130, 40)) as pilot:
        panel = app.query_one(PoolsPanel)
        panel.show([pool])
        await pilot.pause()
        monkeypatch.setattr(Screen, "_refresh_layout", counted)
        counts = [*range(1, 13), *range(11, -1, -1)]
        for n in counts:  # 12 nodes come one by one, then go
            panel.show([pool.model_copy(update={"nodes": [node(i) for i in range(n)]})])
            await pilot.pause()
            assert panel.size.height >= min(n + 1, MAX_LINES)  # every row shown fits
        steps = [h for i, h in enumerate(layouts) if i == 0 or layouts[i - 1] != h]
        assert steps == [2, 4, 8, 4, 2, 1] and len(layouts) <= 2 * len(steps)


def whole_table(pools: list[PoolView]) -> Table:
    """The panel's rows as one table of them all: what the panel must look like."""
    rows = pool_rows(pools, NOW)
    return grid(rows, column_widths(rows))


def test_the_pools_panel_draws_its_rows_as_one_table_of_them_would() -> None:
    """Each row is drawn as a table of its own, with the same column widths, and kept
    until it changes: what the panel shows is what one table of all its rows drew."""
    local = PoolView(name="local", provider="local", max_nodes=20, summary="this machine")
    rented = PoolView(
        name="a100s", provider="vast", max_nodes=4, max_dollars=0.5, max_hours=2,
        summary="1× A100 ≥80 GB, ≤ $1.20/h, a summary long enough to be cut at 80 columns",
    )  # fmt: skip
    drawn: LRUCache[Hashable, list[list[Segment]]] = LRUCache(64)
    for pools in ([local], [rented, local.model_copy(update={"nodes": [node(1)]})], [many()]):
        for width in (80, 130, 200):
            rows = pool_rows(pools, NOW)
            console = Console(width=width)
            options = console.options.update(height=len(rows))  # the panel's height is set
            kept = console.render_lines(PoolLines(rows, drawn), options)
            assert kept == console.render_lines(whole_table(pools), options)
    console, kept = Console(width=130), len(drawn)
    list(console.render(PoolLines(pool_rows([many()], NOW), drawn)))
    assert len(drawn) == kept  # drawn at this width before: nothing drawn again
    changed = many()
    changed.nodes[2] = changed.nodes[2].model_copy(update={"state": NodeState.BUSY})
    list(console.render(PoolLines(pool_rows([changed], NOW), drawn)))
    assert len(drawn) == kept + 1  # the changed node's row alone


def many() -> PoolView:
    pool = PoolView(name="local", provider="local", max_nodes=20, summary="this machine")
    return pool.model_copy(update={"nodes": [node(i) for i in range(20)]})


async def test_the_preview_ticking_its_clock_lays_out_nothing(tmp_path, monkeypatch) -> None:
    """Each second's elapsed time in the preview's summary laid the whole screen out."""
    clock = [NOW]
    run = RunView(
        run_id="20261206-220000-0000abcd", job_name="train", pool="local", state="RUNNING",
        phase="run", created=NOW - timedelta(seconds=5), updated=NOW, run_dir=tmp_path,
    )  # fmt: skip
    preview = RunPreview(lambda: clock[0], Feed(), id="run-preview")

    class Board(App[None]):
        def compose(self) -> ComposeResult:
            yield preview

    laid_out: list[str | None] = []
    refresh = Widget.refresh

    def counted(self, *regions, **kwargs):  # type: ignore[no-untyped-def]
        if kwargs.get("layout"):
            laid_out.append(self.id)
        return refresh(self, *regions, **kwargs)

    app = Board()
    async with app.run_test(size=(120, 40)) as pilot:
        preview.show(run)
        await pilot.pause()
        monkeypatch.setattr(Widget, "refresh", counted)
        clock[0] = NOW + timedelta(seconds=1)
        preview.show(run)
        await pilot.pause()
        assert "elapsed 6s" in str(preview.query_one("#preview-summary", Static).content)
        assert not laid_out
        # a line too long for a row wraps: that changes its height, and lays it out
        preview.show(run.model_copy(update={"job_name": "x" * 300}))
        assert "preview-summary" in laid_out


def running(i: int, run_dir) -> RunView:  # type: ignore[no-untyped-def]
    """A live run started `i` and a half seconds before NOW, the halves apart."""
    created = NOW - timedelta(seconds=i, milliseconds=500 * i)
    return RunView(
        run_id=f"20261206-2200{i:02d}-0000abcd", job_name=f"job{i}", pool="local",
        state="RUNNING", phase="run", created=created, updated=NOW, run_dir=run_dir,
    )  # fmt: skip


async def test_a_tick_repaints_only_the_rows_that_changed(tmp_path, monkeypatch) -> None:
    """DataTable's update_cell repaints the whole table: with 100 live runs, whose clocks
    tick over at different moments, every tick repainted every visible line."""
    clock = [NOW]
    runs = [running(i, tmp_path) for i in range(12)]

    class Board(App[None]):
        def compose(self) -> ComposeResult:
            yield JobsTable(lambda: clock[0], id="jobs")

    repaints: list[tuple[Region, ...]] = []
    refresh = Widget.refresh

    def counted(self, *regions, **kwargs):  # type: ignore[no-untyped-def]
        if isinstance(self, JobsTable):
            repaints.append(regions)
        return refresh(self, *regions, **kwargs)

    app = Board()
    async with app.run_test(size=(130, 30)) as pilot:
        table = app.query_one(JobsTable)
        table.upsert(runs)
        await pilot.pause()
        monkeypatch.setattr(Widget, "refresh", counted)
        made: list[str] = []
        make = jobs_table.cells
        monkeypatch.setattr(
            jobs_table, "cells", lambda run, *a: made.append(run.run_id) or make(run, *a)
        )
        table.upsert(runs)  # nothing changed
        assert not repaints and not made  # the same views at the same second: not even made
        clock[0] = NOW + timedelta(milliseconds=600)  # the odd runs' clocks tick over
        table.upsert(runs)
        assert made == [run.run_id for run in runs[1::2]]
        assert len(repaints) == 6 and all(len(r) == 1 and r[0].height == 1 for r in repaints)
        ticked = {table.get_row_index(r.run_id) for r in runs[1::2]}
        assert {r[0].y - 1 for r in repaints} == ticked  # each its own row, below the header
        before = {run.run_id: str(table.get_cell(run.run_id, "elapsed")) for run in runs}
        await pilot.pause()
        assert before == {run.run_id: fmt.duration(clock[0] - run.created) for run in runs}
        assert (
            table.get_cell(runs[1].run_id, "elapsed").plain
            in drawn(table)[1 + table.get_row_index(runs[1].run_id)]
        )


async def test_rows_moved_down_by_a_new_row_are_not_drawn_again(tmp_path, monkeypatch) -> None:
    """A new run's row on top moves every row down one: 12 runs starting at once drew the
    whole table again for each. A row moved keeps its stripe and is its earlier drawing
    with the row its styles name changed (what a click reports), equal to a fresh one."""
    runs = [running(i, tmp_path) for i in reversed(range(14))]  # oldest first

    cells: list[int] = []
    draw = JobsTable._draw

    def counted(self, value, at):  # type: ignore[no-untyped-def]
        cells.append(at.row)
        return draw(self, value, at)

    app = TableBoard()
    async with app.run_test(size=(130, 30)) as pilot:
        table = app.query_one(JobsTable)
        table.upsert(runs[:10])
        await pilot.pause()
        segments(table)
        monkeypatch.setattr(JobsTable, "_draw", counted)
        for shown in (11, 12):  # each new run's row on top: the others move down
            cells.clear()
            table.upsert(runs[:shown])
            await pilot.pause()
            moved = segments(table)
            # each keeps its stripe (counted from the last row): none is drawn but the
            # new row (0) and the one the mouse left or reached (1, 2)
            assert cells and set(cells) <= {0, 1, 2}, cells
            assert len(cells) <= 3 * len(table.columns), cells
        table.notify_style_update()  # forget every drawing: all drawn afresh
        assert segments(table) == moved
        assert table.get_row_index(runs[0].run_id) == 11
        row = table.render_lines(Region(0, 12, table.size.width, 1))[0]  # below the header
        assert {s.style.meta["row"] for s in row if s.style and s.style.meta} == {11}


async def test_a_held_cursor_key_switches_the_preview_at_most_twice_a_second(
    engine, tmp_path, monkeypatch
) -> None:
    """Each cursor move switched the preview (a log tail read, the screen laid out): with a
    hundred live runs a held `j` spent most of the loop there, and keys waited behind it."""
    monkeypatch.setattr(board, "PREVIEW_EVERY_S", 3600.0)
    app = SwjobApp(with_history(engine, many_runs(RECORDED, tmp_path / "recorded", 6)))
    async with app.run_test(size=(120, 40)) as pilot:
        await booted(pilot)
        table, preview = app.screen.query_one(JobsTable), app.screen.query_one(RunPreview)
        await until(pilot, lambda: table.row_count == 6 and preview.run_id == table.selected)
        app.board._switched_at = 0.0  # long ago
        await pilot.press("j")  # so the preview moves with the cursor at once
        first = table.selected
        assert preview.run_id == first
        await pilot.press("j", "j")
        await pilot.pause(0.3)  # ticks come and go: the preview waits its turn
        assert table.selected != first and preview.run_id == first
        app.board._switched_at = 0.0  # its turn comes
        await until(pilot, lambda: preview.run_id == table.selected)


async def test_a_line_is_drawn_as_datatable_draws_it(tmp_path, monkeypatch) -> None:
    """The table draws a row's line from the frame's widths and styles, worked out once a
    frame, and its cells from each value's drawing, styled: the same segments, styles and
    click targets as DataTable's own drawing, on both stripes, under the cursor and the
    mouse, and the header."""
    runs = [running(i, tmp_path) for i in range(6)]

    app = TableBoard()
    async with app.run_test(size=(150, 12)) as pilot:
        table = app.query_one(JobsTable)
        table.upsert(runs)
        table.move_cursor(row=3)
        table.hover_coordinate = table.hover_coordinate._replace(row=1)
        await pilot.pause()
        ours = segments(table)

        def theirs(self, value, at):  # type: ignore[no-untyped-def]
            return DataTable._render_cell(self, *at)

        monkeypatch.setattr(JobsTable, "_render_line_in_row", DataTable._render_line_in_row)
        monkeypatch.setattr(JobsTable, "_draw", theirs)
        table.notify_style_update()
        assert segments(table) == ours
        assert any(s[2] and s[2].get("out_of_bounds") for s in ours[4])  # the blank right


async def test_a_cell_whose_text_stays_takes_its_new_state_colour(tmp_path) -> None:
    """A run's "why" reads "—" while it is pending and while it runs: only its colour
    says which (Rich's Text equality ignores the style, so the cell was kept)."""
    run = running(0, tmp_path)

    class Board(App[None]):
        def compose(self) -> ComposeResult:
            yield JobsTable(lambda: NOW, id="jobs")

    async with Board().run_test(size=(130, 30)) as pilot:
        table = pilot.app.query_one(JobsTable)
        table.upsert([run.model_copy(update={"state": "PENDING", "phase": "provision"})])
        pending = table.get_cell(run.run_id, "why")
        table.upsert([run])
        now = table.get_cell(run.run_id, "why")
        assert now.plain == pending.plain
        assert (pending.style, now.style) == ("yellow", "cyan")
