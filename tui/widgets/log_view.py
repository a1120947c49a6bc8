"""The live log pane: stream-tagged lines, follow, search, wrap — bounded and batched.

Lines arrive in a capped ring (tui.feed.RunLog) and are pulled into the view 15
times a second, so a flood costs one `write_lines` per tick, not one per line.
Following is a state of its own, not read off the scroll position (which a resize, a
new scrollbar or a run switch moved, and the view then said "paused" by itself): only
the user scrolling up pauses it; `f`/`end`, or scrolling back to the bottom, resume it.
A new run shown follows. While paused, the line at the top stays there as the capped
buffer drops its oldest lines. Wrapping is done here (Log never wraps) by re-flowing
the held lines into width-sized pieces; a reflow keeps following, or keeps the line
that was at the top in view.

A run this console did not see from its start (adopted, or reopened) shows its lines
from the datastream on disk first, then the live ones: `merge` and `follow` join them
where the two overlap, so no line is shown twice or lost.

The view holds the last `cap` lines. When older ones were dropped its subtitle says so,
and a search that finds nothing in the window looks in the run's log files on disk
(`disk`) and says where the line is.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from rich.cells import cell_len, chop_cells
from rich.highlighter import Highlighter
from rich.text import Text
from textual import work
from textual.actions import SkipAction
from textual.binding import Binding
from textual.events import MouseScrollDown, MouseScrollUp, Resize
from textual.screen import ModalScreen
from textual.scrollbar import ScrollTo, ScrollUp
from textual.widgets import Log

from tui import history
from tui.feed import CR, Line, RunLog
from tui.messages import SearchRequested

TAG_WIDTH = 7
ERR_MARK = "┃"
OUT_MARK = "│"
FLUSH_HZ = 15


def tag(step: str, stderr: bool, first: bool = True) -> str:
    mark = ERR_MARK if stderr else OUT_MARK
    return f"{step if first else '':<{TAG_WIDTH - 2}}{mark} "


TAGS = {(step, err): tag(step, err) for step in ("setup", "run") for err in (False, True)}
STAMP_WIDTH = 9  # "12:00:01 "


def stamp(when: float) -> str:
    """The line's time in the operator's zone, from the datastream ('' times: a line read
    from a log file, which keeps none, gets blanks)."""
    if not when:
        return " " * STAMP_WIDTH
    return datetime.fromtimestamp(when).strftime("%H:%M:%S ")


def join_at(before: list[Line], after: list[Line], ahead: int = 0) -> int:
    """How many of `before`'s lines (read from disk) go in front of `after` (the live
    ones shown): `after` starts where the longest stretch of it is found in `before`'s
    tail. The disk, read meanwhile, may already hold up to `ahead` lines the view has not
    shown yet (its ring has them, to come on the next flush), so `before` may run on past
    the stretch by that many; those are left to the ring. The step and text decide a
    match: the log files do not tell stderr apart."""
    if not after:
        return len(before)
    step, _, text, _ = after[0]
    for at in range(max(0, len(before) - len(after) - ahead), len(before)):
        size = min(len(after), len(before) - at)
        if (
            before[at][0] == step
            and before[at][2] == text
            and len(before) - at - size <= ahead
            and all(before[at + i][::2] == after[i][::2] for i in range(1, size))
        ):
            return at
    return len(before)


def writes_over(last: Line, line: Line) -> bool:
    """`line` is drawn in `last`'s place: `last` was ended by a lone CR (a progress
    update) and `line` is the next of its stream, as in a terminal."""
    return last[2].endswith(CR) and last[:2] == line[:2]


def collapsed(lines: Iterable[Line]) -> tuple[list[Line], list[int]]:
    """The lines as a terminal leaves them — one a lone CR ended is written over by the
    next of its stream (a progress bar is one line) — and where each of them began among
    `lines`, then their count: `starts[n]` is how many of `lines` the first n kept ones
    stand for. The view holds lines so; the ring and the disk hold every update, so they
    are joined to the view in this form."""
    kept: list[Line] = []
    starts: list[int] = []
    at = -1
    for at, line in enumerate(lines):
        if kept and writes_over(kept[-1], line):
            kept[-1] = line
        else:
            kept.append(line)
            starts.append(at)
    return kept, [*starts, at + 1]


class LogHighlighter(Highlighter):
    """stderr lines red, the step tag and the times dim, search hits reversed — those on
    the current match's line (`current`) in full colour, with a mark in its tag."""

    def __init__(self) -> None:
        self.term = ""
        self.current = ""  # the rendered line of the current match
        self.times = False

    def highlight(self, text: Text) -> None:
        plain = text.plain
        text.stylize("dim", 0, TAG_WIDTH)
        if plain[TAG_WIDTH - 2 : TAG_WIDTH - 1] == ERR_MARK:
            text.stylize("red", TAG_WIDTH - 2)
        if self.times:
            text.stylize("dim", TAG_WIDTH, TAG_WIDTH + STAMP_WIDTH)
        if self.term:
            current = plain == self.current
            if current:
                text.stylize("bold reverse", 0, TAG_WIDTH - 2)  # the line the match is on
            hit = "bold black on bright_yellow" if current else "reverse yellow"
            lowered, term = plain.lower(), self.term.lower()
            start = lowered.find(term, TAG_WIDTH)
            while start >= 0:
                text.stylize(hit, start, start + len(term))
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
        Binding("t", "toggle_times", "Times", show=False, id="swjob.log_view.toggle_times"),
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
        self._following = True  # as the title last said it
        self._follow = True  # the state itself: only the user pauses it
        self.label = ""  # what the log is of, first in the title: "job · run id · STATE"
        self.disk: tuple[Path, ...] = ()  # the run's log files, for searching past the window
        self.total = 0  # lines the run has logged, of which `held` are the newest
        self.folded = 0  # of those, progress updates written over in place: not dropped
        self._notes: dict[str, str] = {}  # the subtitle's parts: search result, dropped lines

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
            self._update_maximum_width(updates, width)
            if self._follow:
                # A new widest line can bring the horizontal scrollbar, which takes a row
                # from the view: stay on the last line once the layout has settled — if
                # still following then (a `g` between was scrolled back down to the end).
                self.call_after_refresh(self._at_end)

    def attach(self, source: RunLog | None) -> None:
        """Show this run's ring from now on: everything it still holds, then new lines
        (None: show nothing until lines are `add`ed)."""
        self.source, self.seen, self.total, self.folded = source, 0, 0, 0
        self.held.clear()
        self.clear()
        self._notes.clear()
        self.border_subtitle = ""  # the last run's "N of M lines" is not this one's
        self.highlighter.term, self.highlighter.current, self.matches = "", "", []
        self._follow = self.auto_scroll = True  # a run newly shown follows its tail
        self.flush()

    def follow(self, source: RunLog) -> None:
        """Take new lines from this ring too, keeping what is shown: a run read from disk
        that this console has just adopted goes on where its files left off (the ring's
        lines that the disk already had are skipped)."""
        if self.source is None:
            ring = list(source.lines)
            self.source = source
            lines, starts = collapsed(ring)
            held = list(self.held)
            shown = len(held) - join_at(held, lines)  # of the ring's lines, as collapsed
            self.seen = source.total - len(ring) + starts[shown]
            self.flush()

    def merge(self, past: list[Line], total: int) -> None:
        """Put the run's earlier lines, read from disk, before the live ones shown: what
        the ring holds begins where this console started seeing the run (adopted, or
        opened after its ring dropped lines). `total`: lines the run logged in all."""
        if self.source is None:
            self.add(past, total)
            return
        past, starts = collapsed(past)
        shown = list(self.held)
        if self.source.total > len(shown) and len(shown) == self.held.maxlen:
            before: list[Line] = []  # the view is full of live lines already
        else:
            before = past[: join_at(past, shown, ahead=self.source.total - self.seen)]
        if before:
            top, at_top = self.scroll_y, self.scroll_y == 0
            rows_before = self._render(before)
            self.held.clear()
            self.held.extend(before + shown)
            self.clear()
            self.write_lines(rows_before + self._render(shown), scroll_end=False)
            self._stay()
            if not self._follow:  # paused: at the top (`g` before the disk was read) it
                # shows the new top; elsewhere the line it showed, now further down
                y = 0 if at_top else top + len(rows_before)
                self.scroll_to(y=y, animate=False, immediate=True)
        taken = starts[len(before)]  # of the disk's lines, as read
        self.folded += taken - len(before)
        self.total = max(self.total + taken, total)
        self._note_dropped()

    def add(self, lines: Iterable[Line], total: int | None = None) -> None:
        """Append lines that did not come through the ring (e.g. a finished run's disk
        tail); `total` is how many the run logged in all, when more than these. A line
        after one a lone CR ended, of the same stream, is written over it (a progress
        bar is one line, as in a terminal)."""
        new = list(lines)
        self.total = max(self.total + len(new), total or 0)
        if new and self.held and writes_over(self.held[-1], new[0]):
            self._drop_last()
            self.folded += 1
        kept = collapsed(new)[0]
        self.folded += len(new) - len(kept)
        self.held.extend(kept)
        self.write_lines(self._render(kept))
        self._note_dropped()

    def _drop_last(self) -> None:
        """Take the last held line (a progress update) off the view: the next is drawn in
        its place."""
        last = self.held.pop()
        rows = len(self._render([last]))
        del self._lines[len(self._lines) - rows :]
        self._render_line_cache.clear()
        self.virtual_size = self.virtual_size.with_height(len(self._lines))
        self.refresh()

    def write_lines(self, lines: Iterable[str], scroll_end: bool | None = None) -> LogView:
        """Log's write, with following kept by state: the tail stays in view while
        following, and a paused view keeps its line as the oldest lines are dropped."""
        before = len(self._lines)
        written = list(lines)
        super().write_lines(written, scroll_end=False)
        dropped = before + sum(len(line.splitlines()) for line in written) - len(self._lines)
        if not self._follow and dropped > 0:
            self.scroll_to(y=max(0, self.scroll_y - dropped), animate=False, immediate=True)
        self._stay()
        return self

    def _stay(self) -> None:
        """While following, show the tail now and once the layout has settled."""
        if self._follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
            self.call_after_refresh(self._at_end)

    def _at_end(self) -> None:
        if self._follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    def flush(self) -> None:
        if not self._visible():
            return  # a covered screen catches up when shown: the ring keeps its lines
        if self.source is not None and self.source.total != self.seen:
            new = self.source.since(self.seen)
            self.seen = self.source.total
            self.add(new[-self.held.maxlen :] if self.held.maxlen else new, self.seen)
        self._report_follow()

    def _visible(self) -> bool:
        """On the screen the user sees (or under a modal on it)."""
        stack = self.app.screen_stack
        if self.screen not in stack:
            return False
        above = stack[stack.index(self.screen) + 1 :]
        return all(isinstance(screen, ModalScreen) for screen in above)

    @property
    def dropped(self) -> int:
        return max(0, self.total - len(self.held) - self.folded)

    def _note_dropped(self) -> None:
        dropped = self.dropped
        note = f"last {len(self.held):,} of {self.total:,} lines · all in logs/" if dropped else ""
        self._note("dropped", note)

    def _note(self, part: str, text: str) -> None:
        if self._notes.get(part, "") == text:
            return
        self._notes[part] = text
        self.border_subtitle = " · ".join(n for n in self._notes.values() if n)

    @property
    def following(self) -> bool:
        return self._follow

    def _pause(self) -> None:
        if self._follow:
            self._follow = self.auto_scroll = False
            self._report_follow()

    def _resume_at_end(self) -> None:
        """The user scrolled back down to the last line: following again."""
        if not self._follow and (self.is_vertical_scroll_end or self.max_scroll_y == 0):
            self.action_resume()

    def action_scroll_up(self) -> None:
        self._pause()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self._pause()
        super().action_page_up()

    def action_scroll_home(self) -> None:
        """At the top at once: Textual's own `home` glides there for a second, and lines
        read from disk meanwhile (an adopted run's) found the view between, not at the
        top, and kept it there."""
        self._pause()
        if not self._allow_scroll:
            raise SkipAction()  # as Textual's own: the key goes on to the screen
        self.scroll_home(animate=False, immediate=True, x_axis=self.scroll_y == 0)

    def _on_mouse_scroll_up(self, event: MouseScrollUp) -> None:
        if self.max_scroll_y > 0:
            self._pause()
        super()._on_mouse_scroll_up(event)

    def _on_scroll_up(self, event: ScrollUp) -> None:
        self._pause()
        super()._on_scroll_up(event)

    def _on_scroll_to(self, message: ScrollTo) -> None:
        """The scrollbar dragged: paused above the bottom, following at it."""
        if message.y is not None and message.y < self.max_scroll_y:
            self._pause()
        super()._on_scroll_to(message)
        self.call_after_refresh(self._resume_at_end)

    def action_scroll_down(self) -> None:
        super().action_scroll_down()
        self.call_after_refresh(self._resume_at_end)

    def action_page_down(self) -> None:
        super().action_page_down()
        self.call_after_refresh(self._resume_at_end)

    def _on_mouse_scroll_down(self, event: MouseScrollDown) -> None:
        super()._on_mouse_scroll_down(event)
        self.call_after_refresh(self._resume_at_end)

    def _report_follow(self) -> None:
        if self.following != self._following or not self.border_title:
            self._following = self.following
            mode = "following" if self._following else "paused — f/end to follow"
            title = f"logs · {mode}" + (" · wrap" if self.wrap else "")
            title += " · times" if self.highlighter.times else ""
            self.border_title = f"{self.label} · {title}" if self.label else title

    def set_label(self, label: str) -> None:
        if label != self.label:
            self.label = label
            self.border_title = ""
            self._report_follow()

    def _render(self, lines: list[Line]) -> list[str]:
        times = self.highlighter.times
        if not self.wrap:
            if times:
                return [TAGS[step, err] + stamp(when) + text.removesuffix(CR)
                        for step, err, text, when in lines]  # fmt: skip
            return [TAGS[step, err] + text.removesuffix(CR) for step, err, text, _ in lines]
        width = max(10, self.scrollable_content_region.width - TAG_WIDTH - 1)
        out: list[str] = []
        for step, err, text, when in lines:
            text = text.removesuffix(CR)
            line = stamp(when) + text if times else text
            pieces = chop_cells(line, width) if line else [""]
            out.extend(tag(step, err, i == 0) + p for i, p in enumerate(pieces))
        return out

    def _reflow(self) -> None:
        """Re-render the held lines (wrap toggled, width changed): a view that followed
        the tail still does; one scrolled up keeps the same line at its top."""
        top = self._held_at(int(self.scroll_y))
        self.clear()
        self.write_lines(self._render(list(self.held)), scroll_end=False)
        if not self._follow:
            starts = self._starts()
            y = starts[min(top, len(starts) - 1)] if starts else 0
            self.scroll_to(y=y, animate=False, immediate=True)

    def _starts(self) -> list[int]:
        """Rendered rows where a held line begins (a wrapped line's pieces after the
        first carry no step name)."""
        end = TAG_WIDTH - 2
        return [i for i, row in enumerate(self.lines) if row[:end].strip()]

    def _held_at(self, y: int) -> int:
        """The held line shown on rendered row `y`."""
        return max(0, bisect_right(self._starts(), y) - 1)

    def on_resize(self, _event: Resize) -> None:
        if self.wrap:
            self._reflow()
        else:
            self._stay()

    def action_toggle_follow(self) -> None:
        if self._follow:
            self._pause()
        else:
            self.action_resume()

    def action_resume(self) -> None:
        self._follow = self.auto_scroll = True
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self._report_follow()

    def action_toggle_wrap(self) -> None:
        self.wrap = not self.wrap
        self._reflow()
        self.border_title = ""
        self._report_follow()

    def action_toggle_times(self) -> None:
        """Each line's time from the datastream, before its text (lines read from the log
        files have none: blanks)."""
        self.highlighter.times = not self.highlighter.times
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
        term = self.highlighter.term
        if not self.matches:
            self._note("search", "no match" if term else "")
            if term and self.disk:  # the files may hold what the window does not
                self._note("search", f"no match in the last {len(self.held):,} lines…")
                self._search_disk(term)
            return
        self.match_index = (self.match_index + step) % len(self.matches)
        self._follow = self.auto_scroll = False
        target = self.matches[self.match_index]
        self.highlighter.current = self.lines[target]
        self._render_line_cache.clear()  # the mark moves: lines drawn before redraw
        self.refresh()
        self.scroll_to(y=max(0, target - self.size.height // 3), animate=False, immediate=True)
        self._note("search", f"match {self.match_index + 1}/{len(self.matches)}")
        self._report_follow()

    @work(thread=True, exclusive=True, group="disk-search", exit_on_error=False)
    def _search_disk(self, term: str) -> None:
        """The window holds the newest lines only: say whether, and where, the run's log
        files on disk have the term (read in a thread: they can be large)."""
        count, first = history.search_logs(self.disk, term)
        window = f"not in the last {len(self.held):,} lines"
        note = f"{window}; on disk: {count:,}, first at {first}" if first else "no match"
        self.app.call_from_thread(self._disk_found, term, note)

    def _disk_found(self, term: str, note: str) -> None:
        if self.highlighter.term == term:
            self._note("search", note)
