"""End to end through the UI on the real local pool: submit, watch, browse, stop, quit."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from textual.widgets import DirectoryTree

from engine.jobs.jobspec import load_job
from engine.run.masking import mask_from_job_file
from engine.state.store import Store
from tests.support.processes import pid_alive
from tests.support.tap import Tap
from tests.tui.conftest import (
    HELLO,
    REPO,
    SIZE,
    booted,
    finished,
    screen_text,
    tree_labels,
    until,
)
from tui.app import SwjobApp
from tui.screens.board import BoardScreen
from tui.screens.modals import ConfirmStopScreen, QuitScreen
from tui.screens.outputs import OutputsScreen
from tui.screens.submit import SubmitScreen
from tui.widgets.jobs_table import JobsTable


def state_cell(app: SwjobApp, run_id: str) -> str:
    return str(app.screen.query_one(JobsTable).get_cell(run_id, "state"))


async def test_hello_through_the_submit_modal_to_the_outputs_browser(engine) -> None:
    app = SwjobApp(engine, cwd=REPO)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await pilot.press("n")
        assert isinstance(app.screen, SubmitScreen)
        await pilot.press(*"examples/hello/job.toml")
        await until(pilot, lambda: "job hello" in screen_text(app))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, BoardScreen) and engine.runs())
        run_id = engine.runs()[0].run_id
        assert (await finished(app, run_id)).state == "COMPLETED"
        await until(pilot, lambda: state_cell(app, run_id) == "COMPLETED")
        assert any(
            n.title.startswith("hello · ") and n.message == "completed" for n in app._notifications
        )

        await pilot.press("o")
        assert isinstance(app.screen, OutputsScreen)
        tree = app.screen.query_one(DirectoryTree)
        await until(pilot, lambda: "hello.txt" in tree_labels(tree))  # outputs/ opened for us
        await until(pilot, lambda: "verified" in screen_text(app))  # and its file previewed
        shown = screen_text(app)
        assert "hello.txt" in shown and "✓" in shown and "98ea6e4f" in shown
        assert (engine.run(run_id).run_dir / "outputs" / "hello.txt").read_text() == "hi\n"


async def test_s_stops_a_running_job_after_confirmation(engine, make_job) -> None:
    job = make_job(name="sleeper", run="sleep 60")
    app = SwjobApp(engine, jobs=[job])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        await until(pilot, lambda: engine.run(run_id).phase == "run")
        pid = engine.run(run_id).node.offer["pid"]

        await pilot.press("s")  # n cancels
        assert isinstance(app.screen, ConfirmStopScreen)
        await pilot.press("n")
        await pilot.press("s", "escape")  # so does esc
        assert isinstance(app.screen, BoardScreen)
        assert not engine.run(run_id).terminal

        await pilot.press("s", "y")
        view = await finished(app, run_id)
        assert view.state == "FAILED" and view.reason == "stopped by operator"
        assert view.node is not None and view.node.state == "gone"
        assert not pid_alive(int(pid))
        await until(pilot, lambda: state_cell(app, run_id) == "FAILED")
        assert any("stopped by operator" in n.message for n in app._notifications)
        assert app.check_action("stop", ()) is None  # greyed out on a finished job


async def test_s_stops_the_best_effort_collection_of_a_failed_run(engine, make_job) -> None:
    """A run that exited 1 is FAILED, but its node is up while outputs are gathered: `s` must
    still act there (it was greyed out). The agent is frozen as collection begins (the tap
    sees the transition at once) so collection cannot finish by itself."""
    run = "head -c 67108864 /dev/urandom > big.bin; exit 1"
    app = SwjobApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        tap = Tap(engine)
        try:
            job = make_job(name="failing", run=run, outputs=["big.bin"])
            run_id = await engine.submit(job, "local")
            await tap.until(lambda e: getattr(e, "to_phase", None) == "collecting")
        finally:
            tap.close()
        pid = int(engine.run(run_id).node.offer["pid"])
        os.kill(pid, signal.SIGSTOP)
        assert engine.run(run_id).state == "FAILED"
        await until(pilot, lambda: app.check_action("stop", ()) is True)
        await pilot.press("s", "y")
        view = await finished(app, run_id)
        assert view.reason == "run exited with code 1" and view.node.state == "gone"
        assert not pid_alive(pid)


async def test_stop_confirms_with_enter_too(engine, make_job) -> None:
    app = SwjobApp(engine, jobs=[make_job(name="sleeper", run="sleep 60")])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        await pilot.press("s", "enter")
        view = await finished(app, run_id)
        assert view.reason == "stopped by operator"


async def test_quit_with_running_jobs_asks_and_stop_all_tears_down(engine, make_job) -> None:
    app = SwjobApp(engine, jobs=[make_job(name="sleeper", run="sleep 60")])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        await until(pilot, lambda: engine.run(run_id).phase == "run")
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen)
        assert "keep running" in screen_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen, BoardScreen)
        await pilot.press("q", "s")
        await until(pilot, lambda: not app.is_running)
    view = engine.run(run_id)
    assert view.state == "FAILED" and view.reason == "stopped by operator"


async def test_cli_submits_jobs_given_on_the_command_line(engine) -> None:
    app = SwjobApp(engine, jobs=[load_job(HELLO)])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        (run,) = engine.runs()
        assert run.job_name == "hello" and Path(run.run_dir).is_dir()
        assert (await finished(app, run.run_id)).state == "COMPLETED"
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)


async def test_outputs_browser_masks_a_secret_in_a_file_name_and_its_content(
    engine, make_job
) -> None:
    """The file lands under its real name and with its real content; the tree and the
    preview show *** for the secret in both, and the preview still finds the file's
    manifest entry (recorded masked)."""
    secret = "Zq7xW-4f0c9e41b7a2-kP3vY"
    run = 'echo "token=$TOKEN" > "o-$TOKEN.txt"'
    job = make_job(name="masked", env={"TOKEN": secret}, run=run, outputs=["o-*"])
    app = SwjobApp(engine, jobs=[job])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        assert (await finished(app, run_id)).state == "COMPLETED"
        await pilot.press("o")
        tree = app.screen.query_one(DirectoryTree)
        await until(pilot, lambda: "o-***.txt" in tree_labels(tree))
        await until(pilot, lambda: "verified" in screen_text(app))
        await until(pilot, lambda: "token=***" in screen_text(app))
        assert secret not in screen_text(app) and secret not in " ".join(tree_labels(tree))
    landed = engine.run(run_id).run_dir / "outputs" / f"o-{secret}.txt"
    assert landed.read_text() == f"token={secret}\n"
    # a past run (no live driver): the mask comes from its job file via the run index
    store = Store()
    try:
        assert mask_from_job_file(store.recovery(run_id))(f"o-{secret}") == "o-***"
    finally:
        store.close()
