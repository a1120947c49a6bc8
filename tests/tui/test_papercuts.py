"""What a k9s/lazydocker user tripped over, each pressed through Pilot
against a real engine on the local pool."""

from __future__ import annotations

from datetime import timedelta

from rich.console import Console
from textual.containers import VerticalScroll

from engine.engine import Engine
from tests.support.engines import engine_config
from tests.tui.conftest import (
    FIXED_NOW,
    HELLO_RUN,
    RECORDED,
    booted,
    finished,
    opened_outputs,
    screen_rows,
    screen_text,
    toasts,
    until,
    with_history,
)
from tui.app import SwjobApp
from tui.screens.detail import DetailScreen
from tui.screens.help import HelpScreen
from tui.screens.outputs import OutputsScreen
from tui.widgets.jobs_table import JobsTable
from tui.widgets.log_pane import LogPane
from tui.widgets.log_view import LogView
from tui.widgets.preview_pane import PreviewPane

SMALL = (80, 24)


async def recorded_hello(pilot) -> None:
    """The board of RECORDED's two runs, its cursor on the hello run: a finished run for
    a test whose subject is how the console lays one out, not the run."""
    app = await booted(pilot)
    await until(pilot, lambda: app.screen.query_one(JobsTable).row_count == 2)
    await pilot.press("G")
    await until(pilot, lambda: app.screen.query_one(JobsTable).selected == HELLO_RUN)


NUMBERED = "for i in $(seq 1 400); do printf 'line %s %0100d\\n' $i 0; done"  # 2+ rows wrapped


async def test_help_at_80x24_lists_the_screens_keys_first_and_scrolls(engine) -> None:
    app = SwjobApp(engine)
    async with app.run_test(size=SMALL) as pilot:
        await booted(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        dialog = app.screen.query_one(".dialog")
        assert dialog.region.right <= 80 and dialog.region.bottom <= 24
        lines = [line.strip("█ ") for line in screen_text(app).splitlines()]
        keys = [line for line in lines if line[:1] and not line.startswith("Keys")]
        first = next(i for i, line in enumerate(lines) if line.startswith("l "))
        assert "Logs" in lines[first] and "Cursor" not in " ".join(lines[:first])
        assert keys and not any(line.startswith("? ?") for line in keys)
        listing = Console(width=80, record=True, color_system=None)
        listing.print(app.screen.table)  # the whole list, also what is below the fold
        listed = listing.export_text()
        assert "? f1" in listed and "? ?" not in listed
        assert "⏎" in listed.split("Detail")[0].splitlines()[-1]  # enter, named for what it does
        scroll = app.screen.query_one(VerticalScroll)
        assert scroll.max_scroll_y > 0  # more keys than rows at 80×24…
        await pilot.press("j", "j", "pagedown")
        assert scroll.scroll_y > 0  # …and they scroll into view
        await pilot.press("escape")


async def test_wrap_keeps_following_and_keeps_the_line_in_view(engine, make_job) -> None:
    app = SwjobApp(engine, jobs=[make_job(name="numbered", run=NUMBERED)])
    async with app.run_test(size=SMALL) as pilot:
        await booted(pilot)
        await finished(app, engine.runs()[0].run_id)
        await pilot.press("enter")
        view = app.screen.query_one(LogView)
        await until(pilot, lambda: view.line_count == 400 and view.following)
        for _ in range(2):  # wrap on, then off: still on the last line, still following
            await pilot.press("w")
            await pilot.pause()
            assert view.following and "line 400 " in "".join(view.lines[-2:])
            assert view.scroll_y == view.max_scroll_y

        await pilot.press("slash", *"line 123 ", "enter")  # scrolled up to a line
        top = view.lines[int(view.scroll_y)].split()[2]
        for _ in range(2):  # wrap on, then off: the same line stays on top
            await pilot.press("w")
            await pilot.pause()
            assert not view.following and view.lines[int(view.scroll_y)].split()[2] == top


async def test_full_screen_log_names_the_job_and_its_state(engine) -> None:
    app = SwjobApp(with_history(engine, RECORDED))
    async with app.run_test(size=SMALL) as pilot:
        await recorded_hello(pilot)
        await pilot.press("l")
        assert isinstance(app.screen.maximized, LogPane)
        view = app.screen.query_one(LogView)
        await until(pilot, lambda: "COMPLETED" in str(view.border_title))
        assert str(view.border_title).startswith(f"hello · {HELLO_RUN} · COMPLETED · logs")
        assert f"hello · {HELLO_RUN} · COMPLETED" in screen_text(app)


async def test_a_capped_log_says_lines_were_dropped_and_search_finds_them_on_disk(
    engine, make_job
) -> None:
    job = make_job(name="flood", run="echo needle; seq 1 3000")
    app = SwjobApp(engine, jobs=[job], log_cap=200)
    async with app.run_test(size=SMALL) as pilot:
        await booted(pilot)
        await finished(app, engine.runs()[0].run_id)
        await pilot.press("enter")
        view = app.screen.query_one(LogView)
        await until(pilot, lambda: "last 200 of 3,001 lines" in str(view.border_subtitle))
        await pilot.press("slash", *"needle", "enter")
        await until(pilot, lambda: "on disk: 1, first at logs/run.log:1" in view.border_subtitle)
        assert "not in the last 200 lines" in view.border_subtitle
        await pilot.press("slash", *"2999", "enter")  # in the window: found there
        await until(pilot, lambda: "match 1/1" in view.border_subtitle)
        await pilot.press("slash", *"nowhere", "enter")
        await until(pilot, lambda: view.border_subtitle.endswith("lines · all in logs/ · no match"))


async def test_the_spinner_of_the_step_in_progress_turns(engine, make_job) -> None:
    now = [FIXED_NOW]
    app = SwjobApp(engine, jobs=[make_job(name="sleeper", run="sleep 300")], clock=lambda: now[0])
    async with app.run_test(size=SMALL) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        await until(pilot, lambda: engine.run(run_id).phase == "run")
        await pilot.press("enter")

        def frame() -> str:
            """The current step's row as the terminal shows it (its table object's text
            would be its address, which a new table may well reuse)."""
            return next((row for row in screen_rows(app) if "run …" in row), "")

        await until(pilot, lambda: "run …" in screen_text(app))
        seen = {frame()}
        for _ in range(3):
            now[0] += timedelta(seconds=0.25)  # a quarter second: within the same second
            await until(pilot, lambda: frame() not in seen)
            seen.add(frame())
        view = engine.run(run_id)
        assert view.stoppable, f"ended under the test: {view.state} {view.reason} {view.node}"
        await engine.stop(run_id)
        await finished(app, run_id)


async def test_a_job_without_outputs_shows_no_output_pull_bar(engine, make_job) -> None:
    app = SwjobApp(engine, jobs=[make_job(name="bare", run="true")])
    async with app.run_test(size=SMALL) as pilot:
        await booted(pilot)
        run = await finished(app, engine.runs()[0].run_id)
        assert run.transfers["pull"].done and run.transfers["pull"].files_total == 0
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen)
        await until(pilot, lambda: "NodeTornDown" in screen_text(app))
        assert "output pull" not in screen_text(app)
        assert not app.screen.query("#transfer-pull")


async def test_outputs_browser_is_live_and_keys_act_on_the_focused_pane(
    engine, make_job, monkeypatch, tmp_path
) -> None:
    monkeypatch.setenv("PAGER", "cat")
    release = tmp_path / "release"
    job = make_job(
        name="late",
        run=f"while [ ! -e {release} ]; do sleep 0.05; done; seq 1 300 > out.txt",
        outputs=["out.txt"],
    )
    app = SwjobApp(engine, jobs=[job])
    async with app.run_test(size=SMALL) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        await until(pilot, lambda: engine.run(run_id).phase == "run")
        landing = engine.run(run_id).run_dir / "outputs"
        landing.mkdir()  # as a pull leaves it mid-file: the file under its hidden name
        (landing / ".out.txt.swjob-tmp").write_text("half of it")
        await pilot.press("o")  # opened while the job runs: nothing collected yet
        screen = app.screen
        assert isinstance(screen, OutputsScreen)
        assert not (landing / "out.txt").exists()
        # its first look is done (nothing collected): what follows is the browser following
        await until(pilot, lambda: screen._loader is not None and screen._loader.is_finished)
        release.touch()
        await finished(app, run_id)
        await until(pilot, lambda: screen.path is not None and screen.path.name == "out.txt")

        tree, preview = screen.query_one("#tree"), screen.query_one("#preview-scroll")
        await until(pilot, lambda: preview.max_scroll_y > 0)
        await pilot.press("tab")
        assert preview.has_focus
        await pilot.press("j", "j")  # the preview scrolls; the tree's cursor stays
        assert preview.scroll_y == 2 and screen.path.name == "out.txt"
        await pilot.press("shift+tab")
        assert tree.has_focus
        await pilot.press("enter")  # a file: opened in $PAGER (headless: cannot suspend)
        await until(pilot, lambda: any("Cannot suspend" in t for t in toasts(app)))
        await pilot.press("k")
        await until(pilot, lambda: screen.path.name == "outputs")


async def test_at_80x24_the_footer_keeps_help_and_quit_and_a_dialog_shows_its_own_keys(
    engine,
) -> None:
    app = SwjobApp(with_history(engine, RECORDED))
    async with app.run_test(size=SMALL) as pilot:
        await recorded_hello(pilot)
        for key, screen in (("", "board"), ("enter", "detail"), ("o", "outputs")):
            if key:
                await pilot.press(key)
            await pilot.pause()
            footer = screen_text(app).rstrip().splitlines()[-1]
            assert "? Help" in footer and "q Quit" in footer, f"{screen}: {footer!r}"
        await pilot.press("escape", "escape")

        def footer() -> str:
            return screen_text(app).rstrip().splitlines()[-1]

        for key, keys in (("question_mark", "esc/?/q Close"), ("n", "esc Cancel")):
            await pilot.press(key)  # a dialog's own keys, not the board's under it
            await until(pilot, lambda keys=keys: keys in footer())
            assert "Logs" not in footer()
            await pilot.press("escape")


async def test_at_80x24_the_transfer_figures_are_not_cut_off(engine) -> None:
    app = SwjobApp(with_history(engine, RECORDED))
    async with app.run_test(size=SMALL) as pilot:
        await recorded_hello(pilot)  # its one output pulled
        await pilot.press("enter")

        def pull() -> str:
            return next((x for x in screen_text(app).splitlines() if "output pull" in x), "")

        await until(pilot, lambda: "1/1 files" in pull())
        assert pull().rstrip().endswith("· done"), pull()


async def test_outputs_show_verified_when_the_runs_dir_was_given_through_dot_dot(
    tmp_path, make_job
) -> None:
    """`swjob-tui job.toml --runs-dir ../runs` from the job's folder (or a runs dir under a
    symlink, as /tmp is on macOS): the outputs tree lists files by their resolved path, so
    every file said "not in manifest", its SHA-256 and verification not shown."""
    (tmp_path / "jobs").mkdir()
    engine = Engine(engine_config(tmp_path / "jobs" / ".." / "runs"))
    job = make_job(run="echo data > a.txt", outputs=["a.txt"])
    app = SwjobApp(engine, jobs=[job])
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await opened_outputs(pilot, "a.txt")
        pane = screen.query_one(PreviewPane)
        await until(pilot, lambda: pane.render_line(0).text.startswith("a.txt"))
        header = " ".join(pane.render_line(row).text for row in range(3))  # wrapped
        assert "✓ verified" in header and "not in manifest" not in header, header
