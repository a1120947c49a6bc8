"""The outputs browser's file preview: lines laid out off the event loop, drawn a screen at a time.

A text file's preview is up to 256 KiB highlighted — thousands of lines. Highlighting and
laying those out takes hundreds of milliseconds, and done by a Static on the event loop
it froze the console (keys, the engine's heartbeats) each time a large output was
previewed. So the outputs screen's thread worker lays the preview out (`lay_out`) and
this pane only crops the lines in view, as Textual's Log does.
"""

from __future__ import annotations

import gc
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console, RenderableType
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip


@dataclass(frozen=True)
class LaidOut:
    """A preview laid out: each line's text, where its segments end and their styles, and
    the widest line's cells.

    Flat, not Textual Strips: a Strip carries seven caches, and a 256 KiB preview's few
    thousand lines were ~90 k objects that every full garbage collection walked while
    holding the interpreter (stalls of 70-290 ms under load). Strings and arrays are not
    the collector's to walk. The pane makes a Strip only for a line it draws."""

    texts: list[str]
    first: array[int]  # line i's segments are first[i] to first[i + 1] in `ends`/`style_of`
    ends: array[int]  # where each segment ends in its line's text
    style_of: array[int]  # each segment's index in `styles`
    styles: tuple[Style | None, ...]
    width: int

    def strip(self, index: int) -> Strip:
        text, start, segments = self.texts[index], 0, []
        for k in range(self.first[index], self.first[index + 1]):
            end = self.ends[k]
            segments.append(Segment(text[start:end], self.styles[self.style_of[k]]))
            start = end
        return Strip(segments)


@contextmanager
def collections_paused() -> Iterator[None]:
    """No garbage collection while a preview is built. Highlighting and laying out 256 KiB
    makes some 100 k short-lived objects, freed by their reference counts (no cycles), yet
    they triggered collection after collection, each walking them all while holding the
    interpreter (one to 90 ms with the loop waiting). Process-wide, so only for this."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def lay_out(renderable: RenderableType, console: Console, width: int) -> LaidOut:
    """`renderable` laid out `width` cells wide, one line of segments per line, by the
    app's console (so it looks as a Static would draw it). Rendering only reads the
    console: safe in a thread, where the lines are measured too (on the loop that took
    10-80 ms)."""
    options = console.options.update(width=width, highlight=False)
    lines = console.render_lines(renderable, options, pad=False)
    styles: dict[Style | None, int] = {}
    texts, first, ends, style_of = [], array("I", [0]), array("I"), array("I")
    for line in lines:
        end = 0
        for segment in line:
            end += len(segment.text)
            ends.append(end)
            style_of.append(styles.setdefault(segment.style, len(styles)))
        texts.append("".join(segment.text for segment in line))
        first.append(len(ends))
    widest = max((Segment.get_line_length(line) for line in lines), default=0)
    return LaidOut(texts, first, ends, style_of, tuple(styles), widest)


class PreviewPane(ScrollView, can_focus=True):
    """The file preview, a pane of its own: `tab` focuses it, `j`/`k` scroll it."""

    BINDINGS = [
        Binding("j", "scroll_down", "Down", show=False, id="swjob.outputs.scroll_down"),
        Binding("k", "scroll_up", "Up", show=False, id="swjob.outputs.scroll_up"),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines = lay_out(Text("select a file"), Console(), len("select a file"))

    def on_mount(self) -> None:
        self.show(self._lines)

    def show(self, lines: LaidOut) -> None:
        """Draw these lines (the scroll position is kept, as far as the new lines reach)."""
        self._lines = lines
        self.virtual_size = Size(lines.width, len(lines.texts))
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index, width = scroll_y + y, self.scrollable_content_region.width
        if index >= len(self._lines.texts):
            return Strip.blank(width, self.rich_style)
        line = self._lines.strip(index).crop_extend(scroll_x, scroll_x + width, None)
        return line.apply_style(self.rich_style)
