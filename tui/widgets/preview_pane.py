"""The outputs browser's file preview: lines laid out off the event loop, drawn a screen at a time.

A text file's preview is up to 256 KiB highlighted — thousands of lines. Highlighting and
laying those out takes hundreds of milliseconds, and done by a Static on the event loop
it froze the console (keys, the engine's heartbeats) each time a large output was
previewed. So the outputs screen's thread worker renders the preview to strips
(`render_strips`) and this pane only crops the lines in view, as Textual's Log does.
"""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.segment import Segment
from textual.binding import Binding
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip


def render_strips(renderable: RenderableType, console: Console, width: int) -> list[Strip]:
    """`renderable` laid out `width` cells wide, one strip per line, by the app's console
    (so it looks as a Static would draw it). Rendering only reads the console: safe in a
    thread. Each strip's width is measured here too: the pane's `show` needs the widest,
    and measuring thousands of lines took the loop 10-80 ms."""
    options = console.options.update(width=width, highlight=False)
    lines = console.render_lines(renderable, options, pad=False)
    return [Strip(line, Segment.get_line_length(line)) for line in lines]


class PreviewPane(ScrollView, can_focus=True):
    """The file preview, a pane of its own: `tab` focuses it, `j`/`k` scroll it."""

    BINDINGS = [
        Binding("j", "scroll_down", "Down", show=False, id="swjob.outputs.scroll_down"),
        Binding("k", "scroll_up", "Up", show=False, id="swjob.outputs.scroll_up"),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: list[Strip] = [Strip([Segment("select a file")])]

    def on_mount(self) -> None:
        self.show(self._lines)

    def show(self, lines: list[Strip]) -> None:
        """Draw these lines (the scroll position is kept, as far as the new lines reach)."""
        self._lines = lines
        self.virtual_size = Size(max((s.cell_length for s in lines), default=0), len(lines))
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index, width = scroll_y + y, self.scrollable_content_region.width
        if index >= len(self._lines):
            return Strip.blank(width, self.rich_style)
        line = self._lines[index].crop_extend(scroll_x, scroll_x + width, None)
        return line.apply_style(self.rich_style)
