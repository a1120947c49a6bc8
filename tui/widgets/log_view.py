"""The live log pane: stream-tagged lines, follow, search, wrap — bounded and batched.

Lines arrive in a capped ring (tui.feed.RunLog) and are pulled into the view 15
times a second, so a flood costs one `write_lines` per tick, not one per line.
Following is Textual's `Log` behaviour: it sticks to the tail only while the view
sits at the bottom, so scrolling up pauses it; `f`/`end` resume. Wrapping is done
here (Log never wraps) by re-flowing the held lines into width-sized pieces.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from rich.cells import cell_len, chop_cells
from rich.highlighter import Highlighter
from rich.text import Text
from textual.actions import SkipAction
from textual.binding import Binding
from textual.events import Resize
from textual.widgets import Log

from tui.feed import Line, RunLog
from tui.messages import SearchRequested

TAG_WIDTH = 7
ERR_MARK = "┃"
OUT_MARK = "│"
FLUSH_HZ = 15


def tag(step: str, stderr: bool, first: bool = True) -> str:
    mark = ERR_MARK if stderr else OUT_MARK
    return f"{step if first else '':<{TAG_WIDTH - 2}}{mark} "


TAGS = {(step, err): tag(step, err) for step in ("setup", "run") for err in (False, True)}


class LogHighlighter(Highlighter):
    """stderr lines red, the step tag dim, search hits reversed."""

    def __init__(self) -> None:
        self.term = ""

    def highlight(self, text: Text) -> None:
        plain = text.plain
        text.stylize("dim", 0, TAG_WIDTH)
        if plain[TAG_WIDTH - 2 : TAG_WIDTH - 1] == ERR_MARK:
            text.stylize("red", TAG_WIDTH - 2)
        if self.term:
            lowered, term = plain.lower(), self.term.lower()
            start = lowered.find(term, TAG_WIDTH)
            while start >= 0:
                text.stylize("reverse yellow", start, start + len(term))
                start = lowered.find(term, start + len(term))


class LogView(Log):
    BINDINGS = [
        Binding(
            "f",
            "toggle_follow",
            "Follow",
            tooltip="Toggle following the tail",
            id="swjob.log_view.toggle_follow",
        ),
        Binding("end", "resume", "Resume follow", show=False, id="swjob.log_view.resume"),
        Binding("slash", "search", "Search", key_display="/", id="swjob.log_view.search"),
        Binding("n", "next_match", "Next match", show=False, id="swjob.log_view.next_match"),
        Binding(
            "N", "previous_match", "Previous match", show=False, id="swjob.log_view.previous_match"
        ),
        Binding("w", "toggle_wrap", "Wrap", show=False, id="swjob.log_view.toggle_wrap"),
        Binding("g", "scroll_home", "Top", show=False, id="swjob.log_view.scroll_home"),
        Binding("G", "resume", "Bottom", show=False, id="swjob.log_view.bottom"),
        Binding("j", "scroll_down", "Down", show=False, id="swjob.log_view.scroll_down"),
        Binding("k", "scroll_up", "Up", show=False, id="swjob.log_view.scroll_up"),
    ]

    def __init__(self, cap: int = 5000, **kwargs: object) -> None:
        super().__init__(highlight=True, max_lines=cap, **kwargs)  # type: ignore[arg-type]
        self.highlighter = LogHighlighter()
        self.held: deque[Line] = deque(maxlen=cap)
        self.source: RunLog | None = None
        self.seen = 0
        self.wrap = False
        self.matches: list[int] = []
        self.match_index = -1
        self._following = True

    def on_mount(self) -> None:
        self.set_interval(1 / FLUSH_HZ, self.flush, name="log-flush")

    def _update_size(self, updates: int, lines: list[str]) -> None:
        """Textual's Log measures every written line in a thread worker to size its
        horizontal scroll. Under a flood that is a thread per flush walking thousands of
        lines while holding the GIL: it took time from the event loop and kept key
        presses waiting (p95 ~75 ms → ~50 ms without it, tests/bench/tui_flood.py).
        Measuring here, in cells (an ASCII line by its length), gives the same figure
        without the thread: lines reach here as drawable text (tui/printable.py), so
        nothing needs the Log's own control-code pass."""
        if lines:
            width = max(len(line) if line.isascii() else cell_len(line) for line in lines)
            following = self.following
            self._update_maximum_width(updates, width)
            if following:
                # A new widest line can bring the horizontal scrollbar, which takes a row
                # from the view: stay on the last line once the layout has settled.
                self.call_after_refresh(
                    self.scroll_end, animate=False, immediate=True, x_axis=False
                )

    def attach(self, source: RunLog) -> None:
        """Show this run's ring from now on: everything it still holds, then new lines."""
        self.source, self.seen = source, 0
        self.held.clear()
        self.clear()
        self.flush()

    def add(self, lines: Iterable[Line]) -> None:
        """Append lines that did not come through the ring (e.g. a finished run's disk tail)."""
        new = list(lines)
        self.held.extend(new)
        self.write_lines(self._render(new))

    def flush(self) -> None:
        if self.source is not None and self.source.total != self.seen:
            new = self.source.since(self.seen)
            self.seen = self.source.total
            self.add(new[-self.held.maxlen :] if self.held.maxlen else new)
        self._report_follow()

    @property
    def following(self) -> bool:
        return self.auto_scroll and (self.is_vertical_scroll_end or self.max_scroll_y == 0)

    def _report_follow(self) -> None:
        if self.following != self._following or not self.border_title:
            self._following = self.following
            mode = "following" if self._following else "paused — f/end to follow"
            self.border_title = f"logs · {mode}" + (" · wrap" if self.wrap else "")

    def _render(self, lines: list[Line]) -> list[str]:
        if not self.wrap:
            return [TAGS[step, err] + text for step, err, text in lines]
        width = max(10, self.scrollable_content_region.width - TAG_WIDTH - 1)
        out: list[str] = []
        for step, err, text in lines:
            pieces = chop_cells(text, width) if text else [""]
            out.extend(tag(step, err, i == 0) + p for i, p in enumerate(pieces))
        return out

    def _reflow(self) -> None:
        at_end = self.following
        self.clear()
        self.write_lines(self._render(list(self.held)), scroll_end=at_end)

    def on_resize(self, _event: Resize) -> None:
        if self.wrap:
            self._reflow()

    def action_toggle_follow(self) -> None:
        if self.following:
            self.auto_scroll = False
        else:
            self.action_resume()
        self._report_follow()

    def action_resume(self) -> None:
        self.auto_scroll = True
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self._report_follow()

    def action_toggle_wrap(self) -> None:
        self.wrap = not self.wrap
        self._reflow()
        self.border_title = ""
        self._report_follow()

    def action_search(self) -> None:
        self.post_message(SearchRequested())

    def search(self, term: str) -> None:
        """Highlight `term` everywhere and jump to its first hit below the view's top."""
        self.highlighter.term = term
        lowered = term.lower()
        self.matches = [i for i, s in enumerate(self.lines) if term and lowered in s.lower()]
        self.refresh_lines(0, self.line_count)
        following = [i for i, y in enumerate(self.matches) if y >= self.scroll_y]
        self.match_index = (following[0] if following else 0) - 1
        self._move(+1)

    def action_next_match(self) -> None:
        self._skip_unless_searching()
        self._move(+1)

    def action_previous_match(self) -> None:
        self._skip_unless_searching()
        self._move(-1)

    def _skip_unless_searching(self) -> None:
        """With no search, `n` is the app's submit again: the key falls through."""
        if not self.highlighter.term:
            raise SkipAction()

    def _move(self, step: int) -> None:
        if not self.matches:
            self.border_subtitle = "no match" if self.highlighter.term else ""
            return
        self.match_index = (self.match_index + step) % len(self.matches)
        self.auto_scroll = False
        target = self.matches[self.match_index]
        self.scroll_to(y=max(0, target - self.size.height // 3), animate=False, immediate=True)
        self.border_subtitle = f"match {self.match_index + 1}/{len(self.matches)}"
        self._report_follow()
