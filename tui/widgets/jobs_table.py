"""The board's jobs table: one row per job, keyed by the run id of its latest attempt
(tui/chains.py), updated cell by cell.

Rows are never rebuilt on a change: a tick updates only the cells of the runs that
changed (dolphie's process list does the same), so the cursor and scroll stay put.
Only a resize that changes which columns fit rebuilds the table (see `fit_columns`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import datetime
from typing import Generic, NamedTuple, TypeVar

from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.cache import LRUCache
from textual.coordinate import Coordinate
from textual.events import Resize
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, RowDoesNotExist, RowKey

from engine.api import RunView, money
from tui import format as fmt
from tui.widgets.gpu_panel import row_sparkline

Column = tuple[str, str, int]  # key, label, width
D = TypeVar("D")

COLUMNS: tuple[Column, ...] = (
    ("name", "job", 22),
    ("id", "run id", 24),  # YYYYmmdd-HHMMSS-xxxxxxxx, whole: it is what `swjob` commands take
    ("state", "state", 9),
    ("step", "step", 13),
    ("node", "node", 16),
    ("elapsed", "time", 6),  # 12m05s, 2h03m
    ("why", "why", 8),  # why it ended: exit 3, setup 1, cap, stopped, lost
    ("cost", "cost", 11),  # with the pool's cap: $0.006/0.01
)
WIDE: tuple[Column, ...] = (
    ("pool", "pool", 10),
    ("attempts", "try", 5),
    ("gpu", "gpu%", 5),
    ("price", "$/h", 7),
)
"""Columns a wide terminal adds (before the cost), and then the whole reason, last."""
REASON: Column = ("reason", "reason", 20)
NAME_MAX = 40
SHORT_ID = ("id", "id", 8)  # the random tail: the preview below shows the whole id
CHROME = 4  # the table's border and its vertical scrollbar
PADDING = 2  # a cell's padding, left and right
ALERT_MARK = "⚠ "
WARN_AT = 0.8
"""The share of its cap at which a run's cost turns to the warning colour."""
WHY_STYLES = {"COMPLETED": "green", "FAILED": "red", "RUNNING": "cyan", "PENDING": "yellow"}


def width_of(columns: list[Column] | tuple[Column, ...]) -> int:
    return sum(w + PADDING for _, _, w in columns) + CHROME


def fit_columns(width: int) -> tuple[Column, ...]:
    """The columns that fit `width` cells. Elapsed, why and cost must never fall off the
    right edge, so the others give way, in this order: the run id shortens to its tail,
    the node column goes (the preview shows the node), the job name and then the step
    shrink to a floor (their cells end in '…'). A wide terminal gets the pool, the
    attempts, GPU use and price, and the whole reason in what is left."""
    columns = list(COLUMNS)
    wide = [*columns[:-1], *WIDE, columns[-1]]
    if width_of(wide) + REASON[2] + PADDING <= width:
        rest = width - width_of(wide) - PADDING  # the name grows (sweep variants), then the reason
        grown = min(NAME_MAX - wide[0][2], rest - REASON[2])
        wide[0] = (wide[0][0], wide[0][1], wide[0][2] + grown)
        return (*wide, (REASON[0], REASON[1], rest - grown))

    def fits() -> bool:
        return width_of(columns) <= width

    giving_way: list[Callable[[], None]] = [
        lambda: columns.__setitem__(1, SHORT_ID),
        lambda: columns.pop(4),
    ]
    for give in giving_way:
        if fits():
            break
        give()
    for key, floor in (("name", 11), ("step", 9)):
        i = next(i for i, c in enumerate(columns) if c[0] == key)
        over = width_of(columns) - width
        if over > 0:
            columns[i] = (key, columns[i][1], max(floor, columns[i][2] - over))
    return tuple(columns)


def short_id(run_id: str) -> str:
    return run_id.rsplit("-", 1)[-1]


def why_text(run: RunView) -> Text:
    return Text(fmt.why(run), style=WHY_STYLES.get(run.state, ""))


def cost_text(dollars: float | None, cap: float | None) -> str | Text:
    """The cost, with the pool's cap when it has one ('$0.006/0.01'), in the warning
    colour from WARN_AT of it: the cap was invisible until it stopped the run."""
    if cap is None:
        return money(dollars)
    text = f"{money(dollars)}/{cap:g}"
    near = dollars is not None and dollars >= WARN_AT * cap
    return Text(text, style="bold yellow" if near else "")


def ellipsis(value: str | Text, width: int) -> str | Text:
    """A cell cut to `width` ends in '…', so a cut name does not pass for a whole one."""
    if len(value) <= width:
        return value
    if isinstance(value, Text):
        value = value.copy()
        value.truncate(width, overflow="ellipsis")
        return value
    return value[: width - 1] + "…"


def middle_cut(value: str | Text, width: int) -> str | Text:
    """A job name cut to `width` keeps its start and its end around '…': sweep variants
    (`train[lr=0.1]`, `train[lr=0.01]`) differ at their ends, and cut there their rows
    read alike."""
    if len(value) <= width:
        return value
    tail = (width - 1) // 2
    head = width - 1 - tail
    if isinstance(value, Text):
        return Text.assemble(value[:head], "…", value[len(value) - tail :])
    return f"{value[:head]}…{value[len(value) - tail :]}"


def cells(
    run: RunView,
    now: datetime,
    mark: str | None = None,
    cost: float | None = None,
    cap: float | None = None,
) -> dict[str, str | Text]:
    """The row's cells; `mark` replaces the step when the run is not simply at one
    ("queued" for a free node, "elsewhere"/"no owner" when this console does not drive it).
    A later attempt's row says which (`run 2/3`) and costs `cost`, its whole job's;
    `cap`: its pool's cost cap."""
    end = run.finished or now
    node = fmt.short_node_id(run.node) if run.node else "—"
    step = "done" if run.terminal and run.phase == "done" else run.phase
    if run.attempts > 1:
        step = f"{step} {run.attempt}/{run.attempts}"
    if spark := row_sparkline(run):  # the GPU's recent utilisation, while it runs
        step = f"{step} {spark}"
    name: str | Text = run.job_name
    if run.alerts:  # a node that may still bill: the row says so, the banner says what
        name = Text.assemble((ALERT_MARK, "bold red"), run.job_name)
    return {
        "name": name,
        "id": run.run_id,
        "state": fmt.state_text(run.state),
        "step": Text(mark, style="yellow") if mark else step,
        "node": node,
        "elapsed": fmt.duration(end - run.created),
        "why": why_text(run),
        "cost": cost_text(run.cost_dollars if cost is None else cost, cap),
        "pool": run.pool,
        "attempts": f"{run.attempt}/{run.attempts}",
        "gpu": gpu_use(run),
        "price": fmt.price(run.node.price_per_hour if run.node else None).removesuffix("/h"),
        "reason": Text(run.reason or "", style=WHY_STYLES.get(run.state, "")),
    }


def content_key(value: Text) -> Hashable:
    """What a cell shows, as a cache key: equal keys draw alike."""
    return (value.plain, value.style, tuple(value.spans), value.justify, value.overflow)


ROW_STEPS = (10, 16, 24, 32, 48, 64, 96, 128)
"""The table's heights, in run rows: it grows by steps, not by a row (see fit_height)."""
TABLE_CHROME_LINES = 3  # the header and the border's two lines


def same_cell(shown: object, value: object) -> bool:
    """Whether a cell already shows `value`: Rich's Text compares text and spans but not
    its style, so a "—" turning from PENDING's colour to RUNNING's would stay as it was."""
    if isinstance(shown, Text) and isinstance(value, Text):
        return content_key(shown) == content_key(value)
    return shown == value


def gpu_use(run: RunView) -> str:
    """The node's mean GPU utilisation of its latest sample, while it has GPUs."""
    shown = [g.util_pct for g in run.gpus if g.util_pct is not None]
    return f"{sum(shown) / len(shown):.0f}%" if shown and not run.finished else ""


class RowParts(NamedTuple):
    """What every line of a frame is drawn with: the columns' widths, the rows' styles
    (even, odd), the header's, and the blank right of the cells."""

    widths: tuple[int, ...]
    stripes: tuple[Style, Style]
    header: Style
    rest: int


class At(NamedTuple):
    """Where and how a cell is drawn: DataTable's `_render_cell` arguments."""

    row: int
    column: int
    base_style: Style
    width: int
    cursor: bool
    hover: bool


class Drawn(NamedTuple, Generic[D]):
    """A cell's or a line's drawing, and the row it was drawn at."""

    row: int
    lines: D


class JobsTable(DataTable[Text]):
    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, id="swjob.jobs_table.cursor_down"),
        Binding("k", "cursor_up", "Up", show=False, id="swjob.jobs_table.cursor_up"),
        Binding("g", "scroll_top", "Top", show=False, id="swjob.jobs_table.scroll_top"),
        Binding("G", "scroll_bottom", "Bottom", show=False, id="swjob.jobs_table.scroll_bottom"),
        # the table's own enter (it shadows the board's): named for what selecting a row does
        Binding("enter", "select_cursor", "Detail", show=False, id="swjob.jobs_table.open"),
    ]

    def __init__(self, clock: Callable[[], datetime], **kwargs: object) -> None:
        self._drawn: LRUCache[Hashable, Drawn[list[list[Segment]]]] = LRUCache(4096)
        self._lines: LRUCache[Hashable, Drawn[Strip]] = LRUCache(1024)
        self._moved: LRUCache[tuple[Style, int], Style] = LRUCache(4096)
        self._keys: LRUCache[int, tuple[Text, Hashable]] = LRUCache(4096)  # by id(cell)
        self._padded: LRUCache[Hashable, list[list[Segment]]] = LRUCache(1024)  # by content
        self._ends: LRUCache[Hashable, Style] = LRUCache(256)  # the style right of a row
        self._frame: Hashable = ()  # what every cell of this frame is drawn under
        self._parts: tuple[Hashable, RowParts] | None = None
        self._style: Style | None = None  # while a frame is drawn: its rich_style
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.clock = clock
        self._fitted_rows = ROW_STEPS[0]  # as the stylesheet has it (min-height: 13)
        self._created: dict[str, datetime] = {}
        self._rows: dict[str, dict[str, str | Text]] = {}  # every row's cells, for a rebuild
        self._sources: dict[str, tuple[object, ...]] = {}  # what each row was last made from
        self.layout_columns = COLUMNS
        self._add_columns()

    # DataTable draws every cell again after any change: its cell cache is keyed by one
    # count of the table's updates. A tick changes a few cells (the clock, a step), yet
    # all ~150 of 12 runs were drawn again, ~0.15 ms each: 20-50 ms a frame on the
    # console's loop, its worst stalls while 12 runs start (tests/bench/teardown_stall.py).
    # Here a cell is drawn again only when what it shows, or how, changed. Where it is
    # does not count: a new run's row on top moves every row down one, and a cell or a
    # line drawn at another row (with the same zebra stripe) differs from a fresh one
    # only in the row its styles name for the mouse (`_at_row`): renaming that costs a
    # fraction of drawing it (12 runs starting at once: the table's costliest frame
    # 21 -> 8 ms of the loop's CPU). The zebra stripes are counted from the last row up
    # (`_stripe`), so a row moved down by a new one on top keeps its stripe: counted from
    # the top, every row took the other stripe at each new run, and was drawn again.

    def render_lines(self, crop: Region) -> list[Strip]:
        shown = (self.get_pseudo_class_state(), self.show_cursor, self._show_hover_cursor)
        self._frame = (*shown, self.layout_columns)
        self._style = None
        self._style = self.rich_style  # the same for every line of the frame
        try:
            return super().render_lines(crop)
        finally:
            self._style = None

    @property
    def rich_style(self) -> Style:
        """The widget's style: DataTable asks for it on each line it draws, and each time
        it is made again from the styles of every widget above the table."""
        return self._style or super().rich_style

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> list[list[Segment]]:
        if column_index < 0:  # a row label: this table has none
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        if row_index < 0:  # the header
            value = self.ordered_columns[column_index].label
        else:
            value = self.get_cell(*self.coordinate_to_cell_key(Coordinate(row_index, column_index)))
        return self._cell(value, At(row_index, column_index, base_style, width, cursor, hover))

    def _cell(self, value: Text, at: At) -> list[list[Segment]]:
        """The cell showing `value`, from the cache when it was drawn before alike (at
        another row: renamed to this one)."""
        key = (self._content_key(value), at.row < 0, *at[1:], self._frame)
        drawn = self._drawn.get(key)
        if drawn is None:
            drawn = self._drawn[key] = Drawn(at.row, self._draw(value, at))
        elif drawn.row != at.row:
            lines = [self._at_row(line, at.row) for line in drawn.lines]
            drawn = self._drawn[key] = Drawn(at.row, lines)
        return drawn.lines

    def _draw(self, value: Text, at: At) -> list[list[Segment]]:
        """The cell as DataTable draws it (a test compares them): the value in its padding,
        drawn by Rich, then the row's, the cursor's and the click target's styles laid over
        it. The first part, most of the cost, depends on the value alone and is kept: the
        same value on another stripe, under the cursor or the mouse, or at another column
        of the same width (a state, a node, a time shared by other rows) is only styled."""
        row_index, column_index, base_style, width, cursor, hover = at
        padded_key = (self._content_key(value), width)
        padded = self._padded.get(padded_key)
        if padded is None:
            options = self.app.console_options.update_dimensions(width, 1).update(no_wrap=True)
            cell = Padding(value, (0, self.cell_padding))
            padded = self._padded[padded_key] = self.app.console.render_lines(cell, options)
        component, post = self._get_styles_to_render_cell(
            row_index == -1,
            False,
            row_index >= 0 and (row_index < self.fixed_rows or column_index < self.fixed_columns),
            hover,
            cursor,
            self.show_cursor,
            self._show_hover_cursor,
            self.cursor_foreground_priority == "css",
            self.cursor_background_priority == "css",
        )
        pre = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component
        return [list(Segment.apply_style(line, pre, post)) for line in padded]

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        try:
            row_key, _ = self._get_offsets(y)
        except LookupError:  # below the last row
            return super()._render_line(y, x1, x2, base_style)
        if row_key.value is None:  # the header
            index, shown = -1, tuple(content_key(c.label) for c in self.ordered_columns)
        else:
            index = self.get_row_index(row_key)
            shown = tuple(map(self._content_key, self.get_row(row_key)))
        lit = (self.cursor_coordinate.row == index, self.hover_coordinate.row == index)
        stripe = self._stripe(index)
        key = (row_key, shown, stripe, (x1, x2, self.size.width), lit, base_style, self._frame)
        drawn = self._lines.get(key)
        if drawn is None:
            drawn = Drawn(index, super()._render_line(y, x1, x2, base_style))
        elif drawn.row != index:
            moved = Strip(self._at_row(list(drawn.lines), index), drawn.lines.cell_length)
            drawn = Drawn(index, moved)
        self._lines[key] = drawn
        return drawn.lines

    def _content_key(self, value: Text) -> Hashable:
        """`content_key(value)`, kept by the cell's identity: a cell is replaced, never
        changed, when it shows something else, and each line asks for its row's keys."""
        kept = self._keys.get(id(value))
        if kept is None or kept[0] is not value:
            kept = self._keys[id(value)] = (value, content_key(value))
        return kept[1]

    def _render_line_in_row(
        self,
        row_key: RowKey,
        line_no: int,
        base_style: Style,
        cursor_location: Coordinate,
        hover_location: Coordinate,
    ) -> tuple[list[list[Segment]], list[list[Segment]]]:
        """A row's line, its cells side by side and the row's style right of them, as
        DataTable draws it (a test compares them), from what is the same for every line of a
        frame worked out once: DataTable looks up the column widths, the row's and the
        header's styles and the widget's background for each line again, most of a line's
        cost once its cells are kept (10-15 rows moved down a line for each new run)."""
        if (
            self.fixed_columns
            or self.fixed_rows
            or self._should_render_row_labels
            or self.cursor_type != "row"
        ):
            return super()._render_line_in_row(
                row_key, line_no, base_style, cursor_location, hover_location
            )
        parts = self._row_parts(base_style)
        index = self._row_locations.get(row_key)
        if index is None:  # the header
            index, values = -1, [column.label for column in self.ordered_columns]
            style = parts.header
        else:
            data = self._data[row_key]
            values = [data[column.key] for column in self.ordered_columns]
            style = parts.stripes[self._stripe(index)] if self.zebra_stripes else base_style
        cursor, hover = cursor_location.row == index, hover_location.row == index
        line = [
            self._cell(value, At(index, i, style, width, cursor, hover))[line_no]
            for i, (value, width) in enumerate(zip(values, parts.widths, strict=True))
        ]
        line.append([Segment(" " * parts.rest, self._end_style(index, style, cursor, hover))])
        return [], line

    def _stripe(self, index: int) -> int:
        """The row's zebra stripe, 0 or 1 (the header's: 0), counted from the last row."""
        return (self.row_count - 1 - index) % 2 if self.zebra_stripes and index >= 0 else 0

    def _get_row_style(self, row_index: int, base_style: Style) -> Style:
        if row_index < 0 or not self.zebra_stripes:
            return super()._get_row_style(row_index, base_style)
        return super()._get_row_style(self._stripe(row_index), base_style)

    def _row_parts(self, base_style: Style) -> RowParts:
        key = (self._frame, base_style, self.size.width, len(self.ordered_columns))
        if self._parts is None or self._parts[0] != key:
            widths = tuple(column.get_render_width(self) for column in self.ordered_columns)
            stripes = tuple(DataTable._get_row_style(self, i, base_style) for i in (0, 1))
            header = self._get_row_style(-1, base_style)
            rest = max(0, self.size.width - sum(widths))
            self._parts = (key, RowParts(widths, stripes, header, rest))
        return self._parts[1]

    def _end_style(self, index: int, style: Style, cursor: bool, hover: bool) -> Style:
        """The style of the blank right of a row's cells, as DataTable makes it."""
        key = (index, style, cursor, hover, self._frame)
        end = self._ends.get(key)
        if end is None:
            extend, _ = self._get_styles_to_render_cell(
                index == -1,
                False,
                False,
                hover,
                cursor,
                self.show_cursor,
                self._show_hover_cursor,
                False,
                False,
            )
            meta = Style.from_meta({"row": index, "column": 0, "out_of_bounds": True})
            end = self._ends[key] = style + extend + meta
        return end

    def _at_row(self, segments: list[Segment], row: int) -> list[Segment]:
        """Segments drawn at another row as drawn at `row`: DataTable marks each cell's
        style with its row and column (`meta`, what a click reports); nothing else in a
        row's drawing depends on where it is but its zebra stripe, which the caches key on."""
        moved, out = self._moved, []
        for text, style, control in segments:
            if style is not None and style._meta:
                at_row = moved.get((style, row))
                if at_row is None:
                    at_row = moved[(style, row)] = style + Style.from_meta({"row": row})
                style = at_row
            out.append(Segment(text, style, control))
        return out

    def notify_style_update(self) -> None:
        self._drawn.clear()  # the theme, or the CSS, changed how cells look
        self._lines.clear()
        self._moved.clear()
        self._padded.clear()
        self._ends.clear()
        self._parts = None
        super().notify_style_update()

    def _add_columns(self) -> None:
        for key, label, width in self.layout_columns:
            self.add_column(label, key=key, width=width)

    def _shown(self, row: dict[str, str | Text], run_id: str) -> dict[str, Text]:
        """The row as the current columns show it. Each cell is Text: DataTable reads a
        str as markup, so a sweep variant `train[lr=0.1]` showed as `train` (and every
        cell of a row drawn again was parsed again)."""
        short = any(c == SHORT_ID for c in self.layout_columns)
        shown = {
            key: (middle_cut if key == "name" else ellipsis)(row[key], width)
            for key, _, width in self.layout_columns
        }
        if short:
            shown["id"] = short_id(run_id)
        return {key: Text(v) if isinstance(v, str) else v for key, v in shown.items()}

    def on_resize(self, event: Resize) -> None:
        columns = fit_columns(event.size.width)
        if columns == self.layout_columns:
            return
        selected = self.selected
        self.layout_columns = columns
        self.clear(columns=True)
        self._add_columns()
        for run_id in sorted(self._created, key=self._created.__getitem__, reverse=True):
            self.add_row(*self._shown(self._rows[run_id], run_id).values(), key=run_id)
        if selected is not None:
            self.select(selected)

    def upsert(
        self,
        runs: list[RunView],
        marks: dict[str, str] | None = None,
        costs: dict[str, float | None] | None = None,
        caps: dict[str, float] | None = None,
    ) -> None:
        """Update the rows of these runs (`costs`: a job's cost, by its row's run id;
        `caps`: the pools' cost caps, by pool); add new ones and keep newest first."""
        now, added, marks, costs = self.clock(), False, marks or {}, costs or {}
        caps, changed = caps or {}, []
        for run in runs:
            mark, cost = marks.get(run.run_id), costs.get(run.run_id)
            if self._unchanged(run, now, mark, cost, caps.get(run.pool)):
                continue
            row = cells(run, now, mark, cost, caps.get(run.pool))
            self._rows[run.run_id] = row
            if run.run_id in self._created:
                index = self._update_row(run.run_id, self._shown(row, run.run_id))
                if index is not None:
                    changed.append(index)
            else:
                self._created[run.run_id] = run.created
                self.add_row(*self._shown(row, run.run_id).values(), key=run.run_id)
                added = True
        if changed:
            self._update_count += 1  # what DataTable keys its own caches on
            self._repaint_rows(changed)
        if added:
            self._resort()
            self.fit_height()

    def _repaint_rows(self, indexes: list[int]) -> None:
        """Repaint these rows (each one line high: `add_row`'s default). DataTable's
        refresh_row sums the heights of every row above each one: with a hundred rows
        changing, that was most of a tick's work."""
        header = self.header_height if self.show_header else 0
        width = max(self.size.width, self.virtual_size.width)
        for index in indexes:
            self._refresh_region(Region(0, header + index, width, 1))  # drops unseen rows

    def _unchanged(self, run: RunView, now: datetime, *more: object) -> bool:
        """Whether the row would show what it shows: the same view (a run's view is
        replaced, never changed, on each of its events), the same elapsed time and the
        same `more`. A tick updates every live run; with a hundred of them, making each
        row's cells again took most of the tick's ~10 ms."""
        elapsed = fmt.duration((run.finished or now) - run.created)
        source = (run, elapsed, self.layout_columns, *more)
        was = self._sources.get(run.run_id)
        self._sources[run.run_id] = source
        return was is not None and was[0] is run and was[1:] == source[1:]

    def fit_height(self) -> None:
        """Grow or shrink the table in steps of rows (10, 16, 24, 32, …), capped by the
        stylesheet's max-height: a board with a run or two keeps its preview large, and
        12 runs starting at once move the preview under the table twice, not once a run
        (each move draws the whole preview again)."""
        rows = next((step for step in ROW_STEPS if step >= self.row_count), self.row_count)
        if rows != self._fitted_rows:
            self._fitted_rows = rows
            self.styles.height = rows + TABLE_CHROME_LINES

    def _resort(self) -> None:
        """Newest first, with the cursor kept on the run it was on."""
        selected = self.selected
        # each row's id cell as shown (the whole id or its tail): making every row's cells
        # again for it took 4 ms of the loop's CPU a new run with a dozen rows
        created = {str(self.get_cell(r, "id")): c for r, c in self._created.items()}
        self.sort("id", key=lambda shown: created[str(shown)], reverse=True)
        if selected is not None:
            self.select(selected)

    def select(self, run_id: str) -> bool:
        """Put the cursor on this run's row; False when the table has no such row."""
        try:
            self.move_cursor(row=self.get_row_index(run_id), animate=False)
        except RowDoesNotExist:
            return False
        return True

    def _update_row(self, run_id: str, shown: dict[str, Text]) -> int | None:
        """Set the row's cells that changed, without DataTable's update_cell: that
        repaints the whole table, and with a hundred live runs, whose clocks tick over
        at different moments, every tick repainted every visible line (the compositor's
        work per line, ~0.4 ms, held the loop that keys and the engine share). The row's
        index when a cell changed: `upsert` repaints that row alone."""
        cells = self._data.get(RowKey(run_id))
        if cells is None:
            return None
        changed = False
        for column, value in shown.items():
            if column in cells and not same_cell(cells[column], value):  # a str finds its key
                cells[column] = value
                changed = True
        return self.get_row_index(run_id) if changed else None

    def keep_only(self, run_ids: set[str]) -> None:
        """Drop rows not in `run_ids` (the board's filter)."""
        self.drop({rid for rid in self._created if rid not in run_ids})

    def drop(self, run_ids: set[str]) -> None:
        """Remove these runs' rows (a filtered-out run, an attempt a later one replaced)."""
        for run_id in [rid for rid in self._created if rid in run_ids]:
            del self._created[run_id]
            del self._rows[run_id]
            self._sources.pop(run_id, None)
            self.remove_row(run_id)
        self.fit_height()

    @property
    def selected(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        except CellDoesNotExist:
            return None
        return key.value
