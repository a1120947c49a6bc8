"""The board's pools panel: each pool on one line (provider, what it rents, its caps, how
many nodes it may have, or that it has none), then its nodes (state, GPUs, price,
uptime) and the nodes it keeps warm for its next run (idle for, expires in; `W` releases
them). `P` collapses it; the board remembers (tui/prefs.py)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import datetime
from functools import partial

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual.cache import LRUCache
from textual.css.scalar import Scalar
from textual.widgets import Static

from engine.api import NodeView, PoolView, WarmNodeView, money
from tui import format as fmt
from tui.widgets.jobs_table import content_key

MAX_LINES = 8
"""The panel's height at most (a line a row): the runs' table needs the room."""
BOARD_LINES = 21
"""...and what the rest of the board leaves it: the board at its smallest is 21 lines
(header and footer, ten run rows in their box, the preview's head and a log line in its
box). 12 local nodes took 8 of 80×24's lines, and the board overflowed its screen: a
scrollbar, two run rows and the preview's log lost."""


def _pool_row(pool: PoolView) -> list[Text | str]:
    head = Text.assemble((pool.name, "bold"), f"  {pool.provider}", style="")
    none = Text("no nodes" if not pool.nodes and not pool.warm else "", style="dim")
    summary = Text(pool.summary, style="dim")
    return [head, summary, caps(pool), "", f"max {pool.max_nodes}", none]


def _node_row(node: NodeView, now: datetime) -> list[Text | str]:
    return [
        f"  {fmt.short_node_id(node)}",
        fmt.node_state_text(node.state.value),
        fmt.gpu_summary(node) or "—",
        fmt.price(node.price_per_hour) or "—",
        fmt.duration(now - node.since),
        node.run_id or "",
    ]


def _warm_row(node: WarmNodeView) -> list[Text | str]:
    """A kept node: it bills while it idles, so the row says for how long, what it has
    cost, and when its own timer releases it."""
    return [
        f"  {node.node_id}",
        fmt.node_state_text("warm"),
        f"idle {fmt.duration(node.idle_s)}",
        fmt.price(node.price_per_hour) or "—",
        f"billed {money(node.billed)}" if node.billed is not None else "",
        Text(f"expires in {fmt.duration(node.expires_in_s)} · W releases", style="dim"),
    ]


Row = list[Text]
COLUMNS = 6  # a pool's line: name and provider, summary, caps, (price), max nodes, no nodes


def pool_rows(pools: list[PoolView], now: datetime, lines: int = MAX_LINES) -> list[Row]:
    """The panel's rows, cell by cell: at most `lines`, the last saying how many more there
    are (the panel shows no more: rows it would crop were measured and drawn all the same,
    on every tick)."""
    makers: list[Callable[[], list[Text | str]]] = []
    for pool in pools:  # made only if shown: a hundred nodes' rows made for eight lines
        makers.append(partial(_pool_row, pool))
        makers.extend(partial(_node_row, node, now) for node in pool.nodes)
        makers.extend(partial(_warm_row, kept) for kept in pool.warm)
    rows = [make() for make in (makers if len(makers) <= lines else makers[: lines - 1])]
    if len(makers) > lines:
        rows.append([Text(f"  … {len(makers) - lines + 1} more", style="dim")])
    return [[cell if isinstance(cell, Text) else Text(cell) for cell in row] for row in rows]


def column_widths(rows: list[Row]) -> tuple[int, ...]:
    """Each column as wide as its widest cell (given to rich: it measured every cell)."""
    return tuple(
        max((row[i].cell_len for row in rows if i < len(row)), default=0) for i in range(COLUMNS)
    )


def grid(rows: list[Row], widths: tuple[int, ...]) -> Table:
    table = Table.grid(padding=(0, 2), expand=True)
    for width in widths:
        table.add_column(no_wrap=True, overflow="ellipsis", width=width)
    for row in rows:
        table.add_row(*row)
    return table


Lines = list[list[Segment]]


class PoolLines:
    """The panel's rows as one table of them would draw them, each drawn as a table of its
    own with the same column widths (which a table of them all draws alike) and kept: a
    row is drawn again only when it changed. The whole table, drawn on each change (a
    node's state, a second of uptime), took 3-8 ms of the loop's CPU with 8 rows, in the
    frames where 12 runs starting at once also drew their rows.

    A changed row is put together from its cells, each drawn as rich's table draws it and
    kept by what it shows: a node's uptime changes every second, its other cells do not
    (and rich's table, drawn whole for one row, cost 0.3-0.5 ms a row)."""

    def __init__(
        self,
        rows: list[Row],
        drawn: LRUCache[Hashable, Lines],
        cells: LRUCache[Hashable, Lines] | None = None,
    ) -> None:
        self.rows, self.widths, self._drawn = rows, column_widths(rows), drawn
        self._cells = LRUCache[Hashable, Lines](256) if cells is None else cells

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        options = options.reset_height()  # the panel's height is all rows', not each one's
        for row in self.rows:
            key = (tuple(map(content_key, row)), self.widths, options.max_width)
            lines = self._drawn.get(key)
            if lines is None:
                lines = self._drawn[key] = self._draw(console, options, row)
            for line in lines:
                yield from line
                yield Segment.line()

    def _draw(self, console: Console, options: ConsoleOptions, row: Row) -> Lines:
        """The row as `grid([row], widths)` draws it (rich's `Table._render` for a grid of
        one row, cell by cell), or drawn so when a cell takes more than a line."""
        table = grid([row], self.widths)
        widths = tuple(table._calculate_column_widths(console, options))
        shown = options.update(width=sum(widths), highlight=table.highlight, height=None)
        row_style = console.get_style(table.get_row_style(console, 0))
        line: list[Segment] = []
        for index, (column, width) in enumerate(zip(table.columns, widths, strict=True)):
            cell = next(iter(table._get_cells(console, index, column)))
            value = column._cells[0]
            key = (content_key(value) if isinstance(value, Text) else value, index, widths)
            lines = self._cells.get(key)
            if lines is None:
                style = console.get_style(cell.style) + row_style
                each = shown.update(
                    width=width, justify=column.justify, no_wrap=column.no_wrap,
                    overflow=column.overflow, height=None, highlight=column.highlight,
                )  # fmt: skip
                drawn = console.render_lines(cell.renderable, each, style=style)
                if len(drawn) != 1:  # wrapped: rows of other heights are rich's to shape
                    return console.render_lines(table, options)
                lines = self._cells[key] = Segment.set_shape(drawn, width, 1)
            line.extend(lines[0])
        return [line]


def caps(pool: PoolView) -> Text:
    """A run's caps on this pool, in sight before one stops a run ('cap $0.01 · 2h')."""
    parts = [f"${pool.max_dollars:g}" if pool.max_dollars is not None else ""]
    parts.append(fmt.duration(pool.max_hours * 3600) if pool.max_hours is not None else "")
    shown = " · ".join(p for p in parts if p)
    return Text(f"cap {shown}" if shown else "", style="yellow")


def reserved(rows: int, lines: int) -> int:
    """The panel's height for `rows` rows, at most `lines`: the next power of two. Each
    change of its height lays out the whole screen again (10-25 ms of the loop's CPU): a
    line a node made 12 runs starting at once 12 layouts up and 12 down, in steps of 1, 2,
    4, 8 it is three each way, and at most half the panel is blank."""
    return min(lines, 1 << max(0, rows - 1).bit_length())


class PoolsPanel(Static):
    """Re-rendered on each tick: a handful of lines, cheaper than diffing. Its height is
    set, not measured: measuring drew the whole table once more, on the loop."""

    def __init__(self, clock: Callable[[], datetime], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.clock = clock
        self._shown: tuple[object, ...] = ()
        self._drawn: LRUCache[Hashable, Lines] = LRUCache(256)
        self._cells: LRUCache[Hashable, Lines] = LRUCache(512)

    def show(self, pools: list[PoolView]) -> None:
        """Redraw only when what it shows changed (uptimes tick once a second)."""
        now = self.clock()
        lines = max(1, min(MAX_LINES, self.screen.size.height - BOARD_LINES))
        key = (tuple(pools), int(now.timestamp()), lines)
        if key == self._shown:
            return
        self._shown = key
        rows = pool_rows(pools, now, lines)
        height = reserved(len(rows), lines)
        resized = self.styles.height != Scalar.from_number(height)
        if resized:
            self.styles.height = height
        self.update(PoolLines(rows, self._drawn, self._cells), layout=resized)
