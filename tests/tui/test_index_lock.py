"""The console while another process holds the run index's write lock (a `sqlite3` shell
left in `BEGIN EXCLUSIVE;`, a backup, a second swjob mid-write): its loop never waits
on the lock, its runs go on, the lock is said naming the file, and quitting (every run
stopped, its node torn down) is held up by a bounded wait only."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from engine.jobs.jobspec import load_job
from engine.state.store import WRITE_WAIT_S, Store
from tests.support.processes import pid_alive
from tests.support.runs import agent_pid, waiting_job
from tests.support.sqlitelock import locked
from tests.support.stalls import watched_loop
from tests.support.waiting import eventually_async
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
                run_id, agent, asked = await _quit_once_locked(pilot, app, index.path, "s")
            quit_s = time.monotonic() - asked  # the engine closed on unmount, too
    assert quit_s < QUIT_WITHIN_S, f"quitting took {quit_s:.1f} s"
    # a wait on the lock holds the loop WRITE_WAIT_S at least; a loaded machine's slow
    # redraw never comes near half of it
    assert stalls.longest_s < WRITE_WAIT_S / 2, f"the loop stalled {stalls.longest_s:.2f} s"
    view = engine.run(run_id)
    assert view is not None and view.state == "FAILED" and view.reason == "stopped by operator"
    assert not pid_alive(agent)
    note = engine.closing_note  # printed by `swjob-tui` once its screen is gone
    assert note is not None and run_id in note and "the next swjob to open the index" in note


async def test_runs_left_running_while_the_index_is_held_are_adopted_by_the_next_engine(
    engine, make_engine, tmp_path: Path
) -> None:
    """`q` then `l` with the index held from before the run: the console quits within
    the bounded wait, the run's node goes on (billing, as asked), and its row — never
    written — is kept beside the index. Before, it died with the console: no later swjob
    knew of the run, and its node billed until its orphan timeout. Once the lock is gone,
    the next engine writes the row in and adopts the run to its end."""
    index, release = _index_and_release(tmp_path)
    with locked(index):
        run_id, agent, quit_s = await _left_running(engine, index, release)
    assert quit_s < QUIT_WITHIN_S, f"quitting took {quit_s:.1f} s"
    assert pid_alive(agent), "the node was left running: its agent goes on"
    kept = index.parent / "unindexed" / f"{run_id}.json"
    assert kept.exists(), "its row is kept beside the index"
    later = await make_engine(runs_dir=tmp_path / "runs")  # opening the index writes it in
    assert not kept.exists()
    assert await later.adopt(run_id), "the next engine adopts the run left running"
    release.touch()
    view = await asyncio.wait_for(later.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason
    assert (Path(view.run_dir) / "outputs" / "out.txt").read_text() == "done\n"
    await eventually_async(lambda: not pid_alive(agent), what="its node torn down")


async def test_a_run_left_running_is_adopted_while_the_index_is_still_held(
    engine, make_engine, tmp_path: Path
) -> None:
    """As above, but the lock outlives the console: the next console's adoption scan
    found the run in no index row (its row is only kept beside the index), so it was
    adopted only once the lock went — held for hours, the node stopped by itself after
    its orphan timeout, the run lost. The scan takes kept runs too."""
    index, release = _index_and_release(tmp_path)
    with locked(index):
        run_id, agent, _ = await _left_running(engine, index, release)
        assert pid_alive(agent), "the node was left running: its agent goes on"
        later = await make_engine(runs_dir=tmp_path / "runs", adopt_orphans=True)
        await eventually_async(lambda: later.running_run(run_id), 30, "adopted, index held")
        release.touch()
        view = await asyncio.wait_for(later.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason
    assert (Path(view.run_dir) / "outputs" / "out.txt").read_text() == "done\n"
    await eventually_async(lambda: not pid_alive(agent), what="its node torn down")


async def test_swjob_attach_carries_on_a_run_left_running_while_the_index_is_still_held(
    engine, clis, tmp_path: Path
) -> None:
    """The closing note names `swjob attach` for a run left running; with the lock still
    held its row is only kept beside the index, and attach said `no run …`."""
    index, release = _index_and_release(tmp_path)
    with locked(index):
        run_id, agent, _ = await _left_running(engine, index, release)
        attach = clis("attach", run_id, cwd=tmp_path)
        await eventually_async(lambda: "recovered after operator restart" in attach.output(), 30)
        release.touch()
        assert await asyncio.to_thread(attach.wait, 60) == 0, attach.output()
    await eventually_async(lambda: not pid_alive(agent), what="its node torn down")


def _index_and_release(tmp_path: Path) -> tuple[Path, Path]:
    """The run index as a user has it (made by an earlier swjob), and the file whose
    existence ends the held job."""
    index = Store()
    index.close()
    return index.path, tmp_path / "release"


async def _left_running(engine, index: Path, release: Path) -> tuple[str, int, float]:
    """A console whose job runs while `index` is held by another process, quit with `q`,
    `l` (leave running) once the lock is said: the run id, its agent's pid, and how long
    the quit took."""
    app = SwjobApp(engine, jobs=[load_job(waiting_job(release.parent / "p", "held", release))])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run_id, agent, asked = await _quit_once_locked(pilot, app, index, "l")
    return run_id, agent, time.monotonic() - asked


async def _quit_once_locked(
    pilot, app: SwjobApp, index: Path, choice: str
) -> tuple[str, int, float]:
    """Once the console's one run is in its step and the console has said `index` is
    locked, `q` then `choice` in the quit dialog, waited out: the run id, its agent's pid,
    and when the quit was asked (time.monotonic)."""
    engine = app.engine
    run_id = engine.runs()[0].run_id
    lock = f"{index} is locked by another process"
    said = False

    def said_and_running() -> bool:
        # the lock is said once, at the run's first index write, as a toast that lasts 5 s:
        # looked for only once the run was in its step, it was gone on a loaded machine
        nonlocal said
        said = said or any(lock in note for note in toasts(app))
        return said and engine.run(run_id).phase == "run"

    await until(pilot, said_and_running)
    agent = agent_pid(engine.run(run_id).run_dir)
    asked = time.monotonic()
    await pilot.press("q", choice)
    await until(pilot, lambda: not app.is_running, 30)
    return run_id, agent, asked
