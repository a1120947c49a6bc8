"""The log view tells the truth: a run this console did not see from its start shows its
first line (disk, then live, joined without a line twice), following stays on until the
user scrolls up (through run switches, resizes and floods), a paused view keeps its
line while the capped buffer drops old ones, and a run's footer is its own. Pilot on
the view alone, fed as the feed feeds it: no run is the subject here."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from rich.text import Text
from textual.app import App, ComposeResult

from tui import history
from tui.feed import Line, RunLog
from tui.widgets.log_view import LogView, join_at


def numbered(first: int, last: int) -> list[Line]:
    return [("run", False, f"line {i}", 0.0) for i in range(first, last + 1)]


class Host(App[None]):
    def __init__(self, cap: int = 500) -> None:
        super().__init__()
        self.cap = cap

    def compose(self) -> ComposeResult:
        yield LogView(self.cap, id="log")


def shown_live(view: LogView, lines: list[Line]) -> RunLog:
    """A ring holding `lines`, shown by the view (the run's live lines since this console
    took it on)."""
    ring = RunLog(500)
    ring.extend(lines)
    view.attach(ring)
    return ring


def texts(view: LogView) -> list[str]:
    return [text for _, _, text, _ in view.held]


def test_the_live_lines_join_the_disk_where_the_longest_stretch_is_shared() -> None:
    assert join_at(numbered(1, 55), numbered(51, 60)) == 50
    assert join_at(numbered(1, 40), numbered(51, 60)) == 40  # no shared stretch
    assert join_at([], numbered(1, 2)) == 0
    assert join_at(numbered(1, 3), []) == 3
    # stderr is not told apart in the log files: the text and step decide
    assert join_at([("run", False, "a", 0.0)], [("run", True, "a", 5.0)]) == 0


def test_a_disk_ahead_of_the_view_is_cut_where_the_view_starts() -> None:
    """The disk was read after the ring got lines 56-58 that the view has not drawn yet:
    those come with the next flush, so the disk's copies are left out."""
    assert join_at(numbered(1, 58), numbered(51, 55), ahead=3) == 50
    # ... but only as far as the ring is ahead: past that the stretch is no join
    assert join_at(numbered(1, 58), numbered(51, 55), ahead=2) == 58


async def test_an_adopted_run_shows_its_first_line_and_no_line_twice() -> None:
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(LogView)
        ring = shown_live(view, numbered(51, 60))  # what this console saw since it adopted the run
        await pilot.pause()
        view.merge(numbered(1, 55), total=60)  # its datastream on disk, read meanwhile
        ring.extend(numbered(61, 62))
        view.flush()
        await pilot.pause()
        assert texts(view) == [f"line {i}" for i in range(1, 63)]
        assert view.following and "line 62" in view.lines[-1]


async def test_an_adopted_run_whose_disk_is_ahead_of_the_view_shows_each_line_once() -> None:
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(LogView)
        ring = shown_live(view, numbered(51, 55))
        await pilot.pause()
        ring.extend(numbered(56, 58))  # in the ring, not drawn yet, and on disk already
        view.merge(numbered(1, 58), total=58)
        view.flush()
        await pilot.pause()
        assert texts(view) == [f"line {i}" for i in range(1, 59)]


def bar(*texts: str) -> list[Line]:
    return [("run", False, text, 0.0) for text in texts]


async def test_a_progress_bar_in_the_stretch_shared_with_the_disk_is_joined_once() -> None:
    """The view holds a `\r` bar as one line; the ring and the disk hold each update."""
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(LogView)
        shown_live(view, bar("a", "10%\r", "20%\r", "b", "c"))
        await pilot.pause()
        view.merge(bar("x", "a", "10%\r", "20%\r", "b", "c"), total=6)
        await pilot.pause()
        assert texts(view) == ["x", "a", "b", "c"]


async def test_a_run_read_from_disk_then_adopted_joins_across_a_progress_bar() -> None:
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(LogView)
        view.attach(None)
        view.merge(bar("x", "a", "10%\r", "b"), total=4)
        ring = RunLog(500)
        ring.extend(bar("a", "10%\r", "20%\r", "b", "c"))  # replayed from the journal
        view.follow(ring)
        await pilot.pause()
        assert texts(view) == ["x", "a", "b", "c"]


async def test_a_view_paused_before_the_disk_was_read_keeps_its_place() -> None:
    """`g` pressed before the run's disk lines came (a loaded machine reads them late)
    shows the new top, line 1; a view paused elsewhere keeps showing its line."""
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(LogView)
        ring = shown_live(view, numbered(16, 200))  # what this console saw since it adopted the run
        view.focus()
        await pilot.pause()
        app.animation_level = "full"  # as a user's terminal has it
        view.action_scroll_home()  # `g`, seen before anything else runs (Pilot's press
        assert view.scroll_y == 0  # waits out animations): there at once, not gliding
        view.merge(numbered(1, 200), total=200)
        await pilot.pause()
        assert not view.following and "line 1" in view.lines[int(view.scroll_y)]
        view.attach(ring)  # again, now paused a page above the end
        await pilot.pause()
        await pilot.press("pageup")
        top = view.lines[int(view.scroll_y)]
        view.merge(numbered(1, 200), total=200)
        await pilot.pause()
        assert not view.following and view.lines[int(view.scroll_y)] == top


async def test_g_right_after_a_flush_stays_at_the_top() -> None:
    """A flush while following asks to show the tail once the layout has settled; a `g`
    handled before that (a loaded machine paints late) is not scrolled back down."""
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(LogView)
        ring = shown_live(view, numbered(1, 100))
        await pilot.pause()
        ring.extend([("run", False, "a line wider than any before it " * 4, 0.0)])
        view.flush()  # following: the tail, again after the next refresh
        view.action_scroll_home()  # `g`, before that refresh
        await pilot.pause()
        assert not view.following and view.scroll_y == 0, view.scroll_y


async def test_a_run_read_from_disk_then_adopted_goes_on_where_its_files_left_off() -> None:
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(LogView)
        view.attach(None)
        view.merge(numbered(1, 30), total=30)
        ring = RunLog(500)
        ring.extend(numbered(28, 33))  # adopted: the agent replays from its journal
        view.follow(ring)
        await pilot.pause()
        assert texts(view) == [f"line {i}" for i in range(1, 34)]


async def test_following_survives_resizes_switches_and_floods_until_the_user_scrolls_up() -> None:
    app = Host(cap=200)
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(LogView)
        ring = RunLog(200)
        view.attach(ring)
        view.focus()
        for size in ((80, 24), (120, 40), (60, 10), (200, 55)):
            ring.extend(numbered(ring.total + 1, ring.total + 300))
            view.flush()
            await pilot.resize_terminal(*size)
            await pilot.pause()
            assert view.following, size
            assert view.scroll_y == view.max_scroll_y, size
        await pilot.press("k")  # the user scrolls up: paused
        assert not view.following and "paused" in str(view.border_title)
        other = RunLog(200)
        other.extend(numbered(1, 100))
        view.attach(other)  # another run shown: it follows
        await pilot.pause()
        assert view.following and view.scroll_y == view.max_scroll_y
        await pilot.press("k", "G")
        assert view.following and "following" in str(view.border_title)


async def test_a_paused_view_keeps_its_line_while_the_buffer_drops_old_ones() -> None:
    app = Host(cap=100)
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(LogView)
        ring = RunLog(100)
        ring.extend(numbered(1, 100))
        view.attach(ring)
        view.focus()
        await pilot.pause()
        await pilot.press("pageup")
        top = view.lines[int(view.scroll_y)]
        ring.extend(numbered(101, 130))  # 30 more: the 30 oldest are dropped
        view.flush()
        await pilot.pause()
        assert not view.following and view.lines[int(view.scroll_y)] == top


async def test_the_lines_footer_belongs_to_the_run_shown() -> None:
    app = Host(cap=200)
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(LogView)
        view.attach(None)
        view.add(numbered(15, 214), total=214)
        assert "last 200 of 214 lines" in str(view.border_subtitle)
        view.attach(None)  # the next run: one line
        view.add(numbered(1, 1), total=1)
        await pilot.pause()
        assert not view.border_subtitle


async def test_t_shows_each_lines_time_and_search_marks_the_current_match() -> None:
    app = Host()
    async with app.run_test(size=(100, 24)) as pilot:
        view = app.query_one(LogView)
        ring = RunLog(500)
        when = datetime(2026, 1, 2, 12, 0, 1).timestamp()  # local time, as shown
        ring.extend([("run", False, f"step {i} loss", when) for i in range(1, 4)])
        view.attach(ring)
        view.focus()
        await pilot.pause()
        await pilot.press("t")
        assert view.lines[0].endswith("12:00:01 step 1 loss") and "times" in view.border_title
        view.search("loss")
        assert view.highlighter.current == view.lines[0]
        await pilot.press("n")
        assert view.highlighter.current == view.lines[1]
        marked = Text(view.lines[1])
        view.highlighter.highlight(marked)
        assert any("bright_yellow" in str(span.style) for span in marked.spans)
        await pilot.press("t")
        assert view.lines[0].endswith("│ step 1 loss")


async def test_a_progress_bar_rewrites_its_line_as_a_terminal_does() -> None:
    """Each `\\r` update (agent/lines.py keeps the lone CR) is written over the last: a
    tqdm bar is one line, not one per update; a line of the other stream is not."""
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(LogView)
        ring = RunLog(500)
        view.attach(ring)
        ring.extend([("run", False, "start", 0.0), ("run", False, " 10%\r", 0.0)])
        view.flush()
        ring.extend([("run", False, " 50%\r", 0.0), ("run", True, "warn", 0.0)])
        ring.extend([("run", False, "100%\r", 0.0)])
        view.flush()
        ring.extend([("run", False, "done", 0.0)])
        view.flush()
        await pilot.pause()
        assert [line.split("│ ")[-1].split("┃ ")[-1] for line in view.lines] == [
            "start",
            " 50%",
            "warn",
            "done",
        ]


def test_a_log_files_progress_updates_keep_their_cr_mark(tmp_path: Path) -> None:
    """Read from the file, a `\\r` progress bar is the same lines the live feed had: each
    update keeps its CR mark, so it is drawn over and joins its live copy."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "run.log").write_bytes(b"start\n10%\r\n20%\r\ndone\n")
    assert [text for _, _, text, _ in history.tail(tmp_path, 10)] == [
        "start",
        "10%\r",
        "20%\r",
        "done",
    ]


async def test_progress_updates_written_over_are_not_counted_as_dropped() -> None:
    """A `\r` bar's updates are drawn over one another, not dropped: no "last 2 of 4"."""
    app = Host(cap=200)
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(LogView)
        view.attach(None)
        view.add(bar("a", "10%\r"), total=2)
        view.add(bar("20%\r", "b"), total=4)
        await pilot.pause()
        assert texts(view) == ["a", "b"] and view.dropped == 0
        assert "last" not in str(view.border_subtitle)
        shown_live(view, bar("c", "1%\r", "2%\r"))  # live, the disk's lines put before
        view.merge(bar("x", "5%\r", "y", "c"), total=5)
        await pilot.pause()
        assert texts(view) == ["x", "y", "c", "2%\r"] and view.dropped == 0
