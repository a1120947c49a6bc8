"""The console while another process holds the run index's write lock (a `sqlite3` shell
left in `BEGIN EXCLUSIVE;`, a backup, a second swjob mid-write): its loop never waits
on the lock, its runs go on, the lock is said naming the file, and quitting (every run
stopped, its node torn down) is held up by a bounded wait only."""

from __future__ import annotations

import time

from engine.state.store import WRITE_WAIT_S, Store
from tests.support.processes import pid_alive
from tests.support.runs import agent_pid
from tests.support.sqlitelock import locked
from tests.support.stalls import watched_loop
from tests.tui.conftest import SIZE, booted, toasts, until
from tui.app import SwjobApp

QUIT_WITHIN_S = 8.0
"""The stop grace (2 s here) and the index's last bounded try (2 s), with room to spare."""


async def test_the_console_runs_and_quits_while_another_process_holds_the_index(
    engine, make_job
) -> None:
    index = Store()  # the index as a user has it: made by an earlier swjob
    index.close()
    app = SwjobApp(engine, jobs=[make_job(name="sleeper", run="sleep 60")])
    with locked(index.path):
        async with watched_loop() as stalls:
            async with app.run_test(size=SIZE) as pilot:
                await booted(pilot)
                stalls.restart()  # the app's own start (CSS, compose) is not the lock's
                run_id = engine.runs()[0].run_id
                await until(pilot, lambda: engine.run(run_id).phase == "run")
                lock = f"{index.path} is locked by another process"
                await until(pilot, lambda: any(lock in note for note in toasts(app)))
                agent = agent_pid(engine.run(run_id).run_dir)
                asked = time.monotonic()
                await pilot.press("q", "s")
                await until(pilot, lambda: not app.is_running, 30)
            quit_s = time.monotonic() - asked  # the engine closed on unmount, too
    assert quit_s < QUIT_WITHIN_S, f"quitting took {quit_s:.1f} s"
    # a wait on the lock holds the loop WRITE_WAIT_S at least; a loaded machine's slow
    # redraw never comes near half of it
    assert stalls.longest_s < WRITE_WAIT_S / 2, f"the loop stalled {stalls.longest_s:.2f} s"
    view = engine.run(run_id)
    assert view is not None and view.state == "FAILED" and view.reason == "stopped by operator"
    assert not pid_alive(agent)
    note = engine.closing_note  # printed by `swjob-tui` once its screen is gone
    assert note is not None and run_id in note and "only in their landing dirs" in note
