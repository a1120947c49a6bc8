"""The board you can live in: the preview of the selected run, the cursor on the run just
submitted, a run queued for a free node, panes by tab — against a real engine."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from engine.engine import Engine
from engine.jobs.jobspec import load_job
from tests.support.engines import engine_config
from tests.support.runs import only_run_dir, waiting_job
from tests.support.waiting import eventually
from tests.tui.conftest import (
    HELLO,
    REPO,
    booted,
    finished,
    screen_text,
    toasts,
    until,
    with_history,
)
from tui import history
from tui.app import SwjobApp
from tui.screens.modals import ConfirmStopScreen
from tui.screens.submit import SubmitScreen
from tui.widgets.jobs_table import JobsTable
from tui.widgets.log_view import LogView
from tui.widgets.run_preview import RunPreview

SMALL = (80, 24)
DATA = Path(__file__).parent / "data"
RECORDED_HELLO = "20260102-110000-0011"  # data/runs/hello


def preview_text(app: SwjobApp) -> str:
    preview = app.screen.query_one(RunPreview)
    return str(preview.query_one("#preview-summary").render())


async def test_preview_shows_the_selected_run_live_and_follows_the_cursor(engine, make_job) -> None:
    talker = make_job(name="talker", run="echo first-line; echo second-line >&2")
    app = SwjobApp(engine, jobs=[load_job(HELLO), talker])
    async with app.run_test(size=SMALL) as pilot:
        await booted(pilot)
        hello, talk = sorted(engine.runs(), key=lambda r: r.job_name)
        table = app.screen.query_one(JobsTable)
        preview = app.screen.query_one(RunPreview)
        await until(pilot, lambda: table.selected == talk.run_id)  # the last one submitted
        await finished(app, talk.run_id)
        await until(pilot, lambda: "COMPLETED" in preview_text(app))
        assert talk.run_id in preview_text(app)  # the whole id, whatever the table shows
        view = preview.query_one(LogView)
        await until(pilot, lambda: any("second-line" in line for line in view.lines))
        assert "talker" in str(view.border_title)

        await pilot.press("j")
        assert table.selected == hello.run_id
        # the preview switches at most twice a second (board.PREVIEW_EVERY_S): it follows
        await until(pilot, lambda: preview.run_id == hello.run_id)
        await finished(app, hello.run_id)
        await until(pilot, lambda: "hello" in preview_text(app))
        await until(pilot, lambda: any("hi" in line for line in view.lines))
        assert not any("second-line" in line for line in view.lines)

        text = screen_text(app)
        for column in ("time", "why", "cost", "GPU —"):
            assert column in text  # at 80×24 the figures stay on screen


async def test_a_past_run_previews_the_tail_of_its_log_files(engine) -> None:
    """A recorded run, history to this console: its log is read from its files."""
    app = SwjobApp(with_history(engine, DATA / "runs"))
    async with app.run_test(size=SMALL) as pilot:
        await booted(pilot)
        table = app.screen.query_one(JobsTable)
        await until(pilot, lambda: table.row_count == 2)
        await pilot.press("slash", *"hello", "enter")
        preview = app.screen.query_one(RunPreview)
        await until(pilot, lambda: preview.run_id == RECORDED_HELLO)
        assert not app.engine.run(RECORDED_HELLO).live
        view = preview.query_one(LogView)
        await until(pilot, lambda: [line[-2:] for line in view.lines] == ["hi"])


async def test_submit_puts_the_cursor_on_the_new_run(engine) -> None:
    app = SwjobApp(engine, jobs=[load_job(HELLO)], cwd=REPO)
    async with app.run_test(size=SMALL) as pilot:
        await booted(pilot)
        first = engine.runs()[0].run_id
        await finished(app, first)
        table = app.screen.query_one(JobsTable)
        await pilot.press("n", *"examples/hello/job.toml", "enter")
        await until(pilot, lambda: len(engine.runs()) == 2)
        second = next(r.run_id for r in engine.runs() if r.run_id != first)
        await until(pilot, lambda: table.selected == second)
        await pilot.press("G")  # back to the old row; then a submit from the modal's tree
        assert table.selected == first
        await finished(app, second)
        await pilot.press("n")
        assert isinstance(app.screen, SubmitScreen)
        await pilot.press("shift+tab")  # from the path field to the tree
        tree = app.screen.query_one("#files")
        assert tree.has_focus
        for folder in ("examples", "hello"):
            await walk_to(pilot, tree, folder)
            await pilot.press("enter")  # enter on a folder opens it
            await until(pilot, lambda: tree.cursor_node.children)
        await walk_to(pilot, tree, "job.toml")
        await pilot.press("enter")  # enter on a file submits it
        await until(pilot, lambda: len(engine.runs()) == 3)
        third = next(r.run_id for r in engine.runs() if r.run_id not in (first, second))
        await until(pilot, lambda: table.selected == third)
        await finished(app, third)


async def walk_to(pilot, tree, label: str) -> None:
    """Move the tree's cursor down to the node labelled `label`."""
    for _ in range(100):
        if str(tree.cursor_node.label) == label:
            return
        await pilot.press("down")
        await pilot.pause()
    raise AssertionError(f"no {label} in the tree")


async def test_a_run_waiting_for_a_free_node_says_queued(engine, make_job, tmp_path) -> None:
    config = engine_config(engine.config.runs_dir, local={"max_nodes": 1})
    sleeper, waiter = make_job(name="sleeper", run="sleep 60"), make_job(name="waiter", run="true")
    app = SwjobApp(Engine(config), jobs=[sleeper, waiter])
    async with app.run_test(size=SMALL) as pilot:
        await booted(pilot)
        engine = app.engine
        waiting = next(r.run_id for r in engine.runs() if r.job_name == "waiter")
        table = app.screen.query_one(JobsTable)
        await until(pilot, lambda: str(table.get_cell(waiting, "step")) == "queued")
        await until(pilot, lambda: "queued (1 of 1 nodes busy) for" in preview_text(app))
        assert "provisioning" not in preview_text(app)

        await pilot.press("s")  # the stop dialog of a queued run speaks of no node
        assert isinstance(app.screen, ConfirmStopScreen)
        text = screen_text(app)
        assert "no node has joined" in text and "its node torn down" not in text
        await pilot.press("escape")

        running = next(r.run_id for r in engine.runs() if r.job_name == "sleeper")
        await engine.stop(running)
        assert (await finished(app, waiting, timeout=60)).state == "COMPLETED"
        await until(pilot, lambda: str(table.get_cell(waiting, "step")) == "done")


async def test_tab_switches_panes_on_the_board_and_in_the_detail(engine) -> None:
    app = SwjobApp(engine, jobs=[load_job(HELLO)])
    async with app.run_test(size=SMALL) as pilot:
        await booted(pilot)
        await finished(app, engine.runs()[0].run_id)
        table = app.screen.query_one(JobsTable)
        preview = app.screen.query_one(RunPreview)
        preview_log = preview.query_one(LogView)
        # the log box shows once the run's line is in it (a silent run's preview has none)
        await until(pilot, lambda: preview.query_one("#preview-log").display)
        assert table.has_focus
        await pilot.press("tab")
        assert preview_log.has_focus
        await pilot.press("shift+tab")
        assert table.has_focus

        await pilot.press("enter")
        log, timeline = app.screen.query_one(LogView), app.screen.query_one("#timeline")
        assert log.has_focus
        await pilot.press("tab")
        assert timeline.has_focus
        await pilot.press("tab")
        assert log.has_focus


def _adoptee_running(engine, clis, tmp_path, then: str = ""):
    """A real `swjob run` of a job `adoptee` that has printed its lines and waits for the
    returned release file (then prints `then`): the (cli, release) pair."""
    release = tmp_path / "release"
    job = waiting_job(tmp_path / "adoptee", "adoptee", release, then=then)
    runs = engine.config.runs_dir
    cli = clis("run", str(job), "--runs-dir", str(runs), cwd=tmp_path)
    run_dir = only_run_dir(runs, "adoptee")
    eventually(
        lambda: ("run", False, "line 3", 0.0) in history.tail(run_dir, 3), what="the job running"
    )
    return cli, release


async def _only_row(pilot) -> tuple[JobsTable, str]:
    """The booted board with its one row: the table and that row's run id."""
    app = await booted(pilot)
    table = app.screen.query_one(JobsTable)
    await until(pilot, lambda: table.row_count == 1)
    return table, table.selected


async def test_a_run_nobody_drives_is_marked_and_a_adopts_it(engine, clis, tmp_path) -> None:
    """A real `swjob run` drives the run: the board follows it read-only ("elsewhere", `a`
    greyed). Killed with -9, its run has no owner: the row says so and `a` adopts it —
    this console then drives it to COMPLETED. (The fixture engine does not adopt on its
    own, as the real console does every few seconds, so the key is what adopts here.)"""
    cli, release = _adoptee_running(engine, clis, tmp_path)
    app = SwjobApp(engine)
    async with app.run_test(size=SMALL) as pilot:
        table, run_id = await _only_row(pilot)
        assert str(table.get_cell(run_id, "step")) == "elsewhere"
        await until(pilot, lambda: "driven by another swjob process" in preview_text(app))
        assert app.check_action("adopt", ()) is None

        cli.kill9()
        await until(pilot, lambda: str(table.get_cell(run_id, "step")) == "no owner")
        assert "a adopts it" in preview_text(app)
        await pilot.press("a")
        await until(pilot, lambda: engine.running_run(run_id))
        assert any("this console drives it now" in t for t in toasts(app))
        release.touch()
        assert (await finished(app, run_id, timeout=60)).state == "COMPLETED"
        await until(pilot, lambda: str(table.get_cell(run_id, "state")) == "COMPLETED")


@pytest.mark.parametrize("where", ["preview", "detail"])
async def test_a_run_shown_before_it_is_adopted_shows_its_new_lines(
    engine, clis, tmp_path, where
) -> None:
    """The console opens on a run whose operator died: the board's preview (or the run's
    detail) shows its log files' tail. Once this console adopts it, the lines the job
    prints from then on appear there too, and the detail follows the run to its end —
    they reached only the files, and the detail stayed on the run as it was read."""
    cli, release = _adoptee_running(engine, clis, tmp_path, then="after-adoption")
    cli.kill9()
    app = SwjobApp(engine)
    async with app.run_test(size=SMALL) as pilot:
        table, run_id = await _only_row(pilot)
        await until(pilot, lambda: str(table.get_cell(run_id, "step")) == "no owner")
        if where == "detail":
            await pilot.press("enter")
        view = app.screen.query_one(LogView)
        await until(pilot, lambda: any("line 3" in line for line in view.lines))
        await pilot.press("a")
        await until(pilot, lambda: engine.running_run(run_id))
        release.touch()
        assert (await finished(app, run_id, timeout=60)).state == "COMPLETED"
        await until(pilot, lambda: any("after-adoption" in line for line in view.lines))
        assert sum("line 3" in line for line in view.lines) == 1
        await until(pilot, lambda: "COMPLETED" in screen_text(app))


async def test_a_followed_run_is_followed_until_its_node_is_torn_down(
    engine, clis, tmp_path, api
) -> None:
    """A run another `swjob run` drives on Vast, started after the console opened, gets its
    row; it ends: its verdict comes first, then the teardown. That process is held (SIGSTOP)
    at its first destroy, which the stand-in refuses, so the board sees the run COMPLETED
    while still tearing down; let go, the row must reach "done" with its exit code, not stay
    at "teardown"."""
    pools = tmp_path / "pools.toml"
    pools.write_text(
        '[pools.gpu]\nprovider = "vastai"\nimage = "img"\nagent_install = "swjob==0.1.0"\n'
        "[pools.gpu.resources]\ngpu_count = 1\n"
    )
    release = tmp_path / "release"
    release.touch()  # the job ends at once
    job = waiting_job(tmp_path / "elsewhere", "elsewhere", release)
    api.cloud.faults.destroy_failures = 1
    runs = engine.config.runs_dir
    cli = clis(
        "run", str(job), "--pool", "gpu", "--pools", str(pools), "--runs-dir", str(runs),
        cwd=tmp_path,
    )  # fmt: skip
    app = SwjobApp(engine)
    async with app.run_test(size=SMALL) as pilot:
        await booted(pilot)
        eventually(lambda: any(r[0] == "DELETE" for r in api.requests), 90, "a destroy asked")
        cli.signal(signal.SIGSTOP)
        table = app.screen.query_one(JobsTable)
        run_id = only_run_dir(runs, "elsewhere").name
        await until(pilot, lambda: table.row_count == 1)
        await until(pilot, lambda: str(table.get_cell(run_id, "state")) == "COMPLETED")
        assert str(table.get_cell(run_id, "step")) == "teardown"
        cli.signal(signal.SIGCONT)
        assert cli.wait(60) == 0, cli.output()
        await until(pilot, lambda: str(table.get_cell(run_id, "step")) == "done")
        assert str(table.get_cell(run_id, "why")) == "exit 0"
