"""Every binding and modal, pressed through Pilot against a real engine on the local pool."""

from __future__ import annotations

import json
from pathlib import Path

from rich.cells import cell_len
from rich.text import Text
from textual.command import CommandList, CommandPalette
from textual.widgets import Input, Static

from engine.jobs.jobspec import load_job
from tests.tui.conftest import (
    HELLO,
    HELLO_RUN,
    RECORDED,
    SIZE,
    TRAINER,
    booted,
    finished,
    screen_text,
    toasts,
    until,
    with_history,
)
from tui import history
from tui.app import SwjobApp
from tui.screens.board import BoardScreen, FilterBar
from tui.screens.detail import DetailScreen
from tui.screens.help import HelpScreen
from tui.screens.modals import QuitScreen
from tui.screens.outputs import OutputsScreen
from tui.screens.submit import SubmitScreen
from tui.widgets.jobs_table import JobsTable
from tui.widgets.log_pane import LogPane, SearchBar
from tui.widgets.log_view import LogView

CHATTY = "for i in $(seq 1 300); do echo line $i; echo err $i >&2; done"


async def test_board_moves_opens_detail_and_logs(engine) -> None:
    """On two recorded runs: the keys move over the board's rows, a run's being live or
    not is no part of it (a live run's detail: test_e2e, test_board)."""
    app = SwjobApp(with_history(engine, RECORDED))
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        table = app.screen.query_one(JobsTable)
        await until(pilot, lambda: table.row_count == 2)
        newest, oldest = TRAINER, HELLO_RUN
        assert str(table.get_row_at(0)[1]) == newest  # newest first
        await pilot.press("g")
        assert table.selected == newest
        await pilot.press("j")
        assert table.selected == oldest
        await pilot.press("k")
        assert table.selected == newest
        await pilot.press("G")
        assert table.selected == oldest
        await pilot.press("g", "down", "up")
        assert table.selected == newest

        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen) and app.screen.run_id == newest
        await until(pilot, lambda: "NodeTornDown" in screen_text(app))
        assert "JobSubmitted" in screen_text(app) and "ProvisionNode" in screen_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen, BoardScreen)

        await pilot.press("l")
        assert isinstance(app.screen, DetailScreen)
        assert isinstance(app.screen.maximized, LogPane)
        await pilot.press("l")
        assert app.screen.maximized is None
        await pilot.press("escape")
        assert isinstance(app.screen, BoardScreen)


async def test_filter_narrows_the_board_and_esc_clears_it(engine) -> None:
    """On past runs (a filter acts on the board's rows, live or not): one of two matches."""
    app = SwjobApp(with_history(engine, RECORDED))
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        table = app.screen.query_one(JobsTable)
        await until(pilot, lambda: table.row_count == 2)
        await pilot.press("slash")
        assert app.screen.query_one(FilterBar).has_focus
        await pilot.press(*"nomatch")
        assert table.row_count == 0
        await pilot.press("escape")
        assert table.row_count == 2 and table.has_focus
        await pilot.press("slash", *"hello", "enter")
        assert table.row_count == 1 and table.has_focus
        assert str(table.get_row_at(0)[0]).endswith("hello"), table.get_row_at(0)
        # enter keeps the filter and closes its bar; the table says what it filters by
        assert not app.screen.query_one(FilterBar).display
        assert table.border_title == "filter: hello · esc clears"
        await pilot.press("escape")
        assert table.row_count == 2 and not table.border_title


async def test_finished_job_cannot_be_stopped(engine) -> None:
    app = SwjobApp(with_history(engine, RECORDED))
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await until(pilot, lambda: app.screen.query_one(JobsTable).row_count == 2)
        await pilot.press("G")  # the recorded hello run, COMPLETED
        await until(pilot, lambda: app.check_action("stop", ()) is None)
        await pilot.press("s")
        assert isinstance(app.screen, BoardScreen)
        # a key that does not apply says why, in one line
        await until(pilot, lambda: any("has ended (COMPLETED): nothing to stop" in t
                                       for t in toasts(app)))  # fmt: skip
        await pilot.press("o")
        assert isinstance(app.screen, OutputsScreen)
        await pilot.press("escape")
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)


async def test_help_lists_the_keys_of_where_you_are(engine) -> None:
    app = SwjobApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        for key in ("question_mark", "f1"):  # one console for both keys
            await pilot.press(key)
            assert isinstance(app.screen, HelpScreen), key
            text = screen_text(app)
            for description in ("Submit", "Stop", "Outputs", "Filter", "Quit", "Help"):
                assert description in text
            await pilot.press("escape")
            assert isinstance(app.screen, BoardScreen)


async def test_palette_offers_every_action_and_runs_it(engine) -> None:
    app = SwjobApp(engine, jobs=[load_job(HELLO)])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await pilot.press("ctrl+p")
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"open run hello")
        await until(pilot, lambda: "Openrunhello" in screen_text(app).replace(" ", ""))
        await pilot.press(*["backspace"] * 14, *"Quit")
        await until(pilot, lambda: palette_titles(app) != [])
        assert palette_titles(app) == ["Quit"]  # once: Textual's own "Quit" is not listed too
        await pilot.press(*["backspace"] * 4, *"Submit")
        await until(pilot, lambda: "key:n" in screen_text(app).replace(" ", ""))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, SubmitScreen))
        await pilot.press("escape")
        await finished(app, engine.runs()[0].run_id)


def palette_titles(app: SwjobApp) -> list[str]:
    """The entries the open palette lists, by title."""
    options = app.screen.query_one(CommandList).options
    return [option.hit.text or str(option.hit.prompt) for option in options]


def inline_error(app: SwjobApp) -> str:
    return str(app.screen.query_one("#error", Static).content)


async def test_submit_modal_shows_problems_inline_naming_the_field(engine, tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[job]\nname = "x"\nrun = "true"\ngpu = "A100"\n')
    app = SwjobApp(engine, cwd=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await pilot.press("n")
        await pilot.press("enter")
        await until(pilot, lambda: "choose a .toml file" in screen_text(app))
        await pilot.press(*"bad.toml")
        await until(pilot, lambda: "gpu" in screen_text(app))
        assert "bad.toml:4" in screen_text(app)
        # named as typed: a long absolute path would push the problem off the line
        assert inline_error(app).startswith("bad.toml:4: ")
        await pilot.press("enter")  # refused: nothing submitted, the modal stays
        await pilot.pause()
        assert isinstance(app.screen, SubmitScreen) and engine.runs() == []
        await pilot.press(*"x")
        await until(pilot, lambda: inline_error(app) == "bad.tomlx: file not found")
        assert "file not found" in screen_text(app)
        # tab lands on the pool's select: what is typed there still goes to the path
        await pilot.press("tab")
        assert app.screen.query_one("#pool").has_focus
        await pilot.press("backspace", "y")
        field = app.screen.query_one("#path", Input)
        assert field.has_focus and field.value == "bad.tomlxy"
        await pilot.press("escape")
        assert isinstance(app.screen, BoardScreen)


async def test_log_pane_follow_search_and_wrap(engine, make_job) -> None:
    app = SwjobApp(engine, jobs=[make_job(name="chatty", run=CHATTY)])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        await finished(app, run_id)
        await pilot.press("enter")
        view = app.screen.query_one(LogView)
        await until(pilot, lambda: view.line_count == 600)
        assert view.has_focus and view.following
        stderr = next(line for line in view.lines if "err 7" in line)
        styled = view.highlighter(Text(stderr))
        assert any("red" in str(span.style) for span in styled.spans)

        await pilot.press("n")  # no search yet: n is submit, as everywhere
        assert isinstance(app.screen, SubmitScreen)
        await pilot.press("escape")
        assert view.has_focus

        await pilot.press("g")
        assert not view.following
        await pilot.press("end")
        assert view.following
        await pilot.press("f")
        assert not view.following and "paused" in str(view.border_title)
        await pilot.press("f")
        assert view.following

        await pilot.press("slash")
        bar = app.screen.query_one(SearchBar)
        assert bar.has_focus
        await pilot.press(*"err 1", "enter")
        assert view.has_focus and not bar.display
        assert len(view.matches) == 111 and view.border_subtitle == "match 1/111"
        first = view.scroll_y
        await pilot.press("n")
        assert view.border_subtitle == "match 2/111" and not view.following
        await pilot.press("N", "N")
        assert view.border_subtitle == "match 111/111" and view.scroll_y > first

        await pilot.press("w")
        assert view.wrap and "wrap" in str(view.border_title)
        assert max(len(line) for line in view.lines) <= view.scrollable_content_region.width


async def test_wide_characters_wrap_and_measure_in_cells(engine, make_job) -> None:
    """A line of CJK text is twice as wide as it is long: wrapped pieces fit the pane in
    cells, and the unwrapped view can scroll to the end of it."""
    job = make_job(name="wide", run="python3 -c \"print('漢字' * 150)\"")
    app = SwjobApp(engine, jobs=[job])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await pilot.press("enter")
        await finished(app, engine.runs()[0].run_id)
        view = app.screen.query_one(LogView)
        await until(pilot, lambda: any("漢字" in line for line in view.lines))
        assert view.virtual_size.width >= 600  # 300 wide characters, not 300 cells
        view.focus()
        await pilot.press("w")
        width = view.scrollable_content_region.width
        assert len(view.lines) > 600 // width
        assert max(cell_len(line) for line in view.lines) <= width


async def test_log_memory_is_capped(engine, make_job) -> None:
    job = make_job(name="flood", run="seq 1 5000")
    app = SwjobApp(engine, jobs=[job], log_cap=200)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        await pilot.press("enter")
        await finished(app, run_id)
        view = app.screen.query_one(LogView)
        await until(pilot, lambda: view.lines and view.lines[-1].endswith(" 5000"))
        assert view.line_count == 200 and len(app.feed.log(run_id).lines) == 200
        assert app.feed.log(run_id).total == 5000
        on_disk = Path(engine.log_path(run_id, "run")).read_text().splitlines()
        assert len(on_disk) == 5000  # the cap is the view's only: the log file keeps all
        assert on_disk[0].endswith("1") and on_disk[-1].endswith("5000")


async def test_outputs_browser_keys(engine, monkeypatch) -> None:
    monkeypatch.setenv("PAGER", "cat")
    app = SwjobApp(with_history(engine, RECORDED))
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await until(pilot, lambda: app.screen.query_one(JobsTable).row_count == 2)
        await pilot.press("G", "o")  # the recorded hello run's outputs
        screen = app.screen
        assert isinstance(screen, OutputsScreen)
        # it opens on outputs/ with the first file under the cursor
        await until(pilot, lambda: screen.path is not None and screen.path.name == "hello.txt")
        await pilot.press("k")
        await until(pilot, lambda: screen.path is not None and screen.path.name == "outputs")
        await pilot.press("e")  # a directory: nothing to open
        await until(pilot, lambda: "Select a file first" in toasts(app))
        await pilot.press("j", "v")  # a file: headless, the app cannot suspend
        await until(pilot, lambda: any("Cannot suspend" in t for t in toasts(app)))
        await pilot.press("tab")
        assert not screen.query_one("#tree").has_focus
        await pilot.press("escape")
        assert isinstance(app.screen, BoardScreen)


async def test_outputs_browser_calls_out_a_pull_that_did_not_finish(engine) -> None:
    app = SwjobApp(with_history(engine, RECORDED))
    manifest = engine.config.runs_dir / "hello" / HELLO_RUN / "manifest.json"
    body = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(body | {"complete": False}))  # as a failed pull writes it
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await until(pilot, lambda: app.screen.query_one(JobsTable).row_count == 2)
        await pilot.press("G")  # the recorded hello run
        await pilot.press("o")
        await until(pilot, lambda: "the output pull did not finish" in screen_text(app))


async def test_quit_modal_leave_running_and_cancel_keys(engine) -> None:
    """`l` leaves runs to their nodes (the engine is closed without stopping them); `c` and
    the Cancel button keep the console. Shown here over a recorded run, so nothing leaks."""
    app = SwjobApp(with_history(engine, RECORDED))
    run = history.load(engine.config.runs_dir / "hello" / HELLO_RUN, 10).view
    assert run is not None
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        for cancel in ("c", "#cancel"):
            app.push_screen(QuitScreen([run]), app._quit_answer)
            await pilot.pause()
            await (pilot.press(cancel) if cancel == "c" else pilot.click(cancel))
            assert isinstance(app.screen, BoardScreen) and app.is_running
        app.push_screen(QuitScreen([run]), app._quit_answer)
        await pilot.pause()
        await pilot.press("l")
        await until(pilot, lambda: not app.is_running)
    assert app._stop_on_close is False


async def test_quit_without_live_runs_exits_at_once(engine) -> None:
    app = SwjobApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await pilot.press("question_mark", "q")  # q closes the help first
        assert isinstance(app.screen, BoardScreen)
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)


async def test_an_empty_board_says_how_to_submit(engine) -> None:
    app = SwjobApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await until(pilot, lambda: "No jobs yet. Press n to submit" in screen_text(app))
        await pilot.press("n")
        assert isinstance(app.screen, SubmitScreen)
