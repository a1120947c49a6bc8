"""The console on a `vastai` pool, against the Vast.ai stand-in (tests/standin) through the
real SDK: orphaned nodes collected from the board, live cost, offer facts, missing outputs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine.engine import Engine
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.engines import engine_config
from tests.support.vast import bootstrap, gpu_pool, provider
from tests.tui.conftest import SIZE, booted, finished, screen_text, toasts, until
from tui.app import SwjobApp
from tui.screens.board import BoardScreen
from tui.screens.detail import DetailScreen
from tui.screens.orphans import OrphansScreen
from tui.screens.outputs import OutputsScreen
from tui.widgets.banner import Banner
from tui.widgets.jobs_table import JobsTable

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def engine(api: StandIn, tmp_path: Path) -> Engine:
    """Not started: the app starts it (and its orphan check) and closes it on unmount."""
    return Engine(engine_config(tmp_path / "runs", gpu_pool(max_nodes=4)))


@pytest.fixture
async def orphan(api: StandIn) -> AsyncIterator[str]:
    """An instance rented by an engine that then crashed: a ledger row, a labelled
    instance, no live run. Its id is yielded."""
    api.cloud.faults.never_start = True
    handle = await provider(api, gpu_pool(max_nodes=4), []).provision(bootstrap("run-crashed"))
    yield handle.node_id


def banner(app: SwjobApp) -> str:
    return str(app.screen.query_one(Banner).content) if app.screen.query(Banner) else ""


async def test_x_lists_orphans_and_collects_them_after_confirmation(engine, api, orphan) -> None:
    app = SwjobApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        # the engine's start-up check: a warning toast, and a banner that stays
        await until(pilot, lambda: any(f"instance {orphan}" in t for t in toasts(app)))
        await until(pilot, lambda: f"instance {orphan}" in banner(app))
        assert "x to collect" in banner(app)

        await pilot.press("x")  # n cancels: nothing destroyed
        screen = app.screen
        assert isinstance(screen, OrphansScreen)
        await until(pilot, lambda: screen.found is not None)
        assert f"instance {orphan}" in screen_text(app) and "billing for" in screen_text(app)
        await pilot.press("n")
        assert isinstance(app.screen, BoardScreen) and int(orphan) in api.cloud.instances

        await pilot.press("x")
        await until(pilot, lambda: getattr(app.screen, "found", None))
        await pilot.press("y")
        await until(pilot, lambda: any("collected 1 of 1" in t for t in toasts(app)))
        assert api.cloud.instances == {} and Ledger().open_entries() == []
        await until(pilot, lambda: not app.screen.query_one(Banner).display)

        await pilot.press("ctrl+p", *"Collect orphans")  # the palette offers it too
        await until(pilot, lambda: "key:x" in screen_text(app).replace(" ", ""))
        await pilot.press("enter")  # nothing left: the modal says so, and y destroys nothing
        await until(pilot, lambda: "no orphaned nodes" in screen_text(app))
        await pilot.press("y")
        assert isinstance(app.screen, BoardScreen)


async def test_collect_counts_only_our_nodes_and_says_what_it_left(engine, api, orphan) -> None:
    """Another operator's instance on the same account is listed read-only. The dialog
    offered "collect all 2" though collecting skips it; it now counts only ours, says what
    it leaves, and after collecting says what went and what was left and why. With only
    theirs listed, `y` is disabled and the dialog says why."""
    offer = api.cloud.rentable()[0]["id"]
    body = {"image": "x", "disk": 10, "env": {}, "onstart": None}
    theirs = api.cloud.create(offer, body | {"label": "swjob:0badc0de:run-theirs"})
    assert theirs is not None
    try:
        await _collect_beside(engine, api, orphan, theirs.id)
    finally:
        api.cloud.destroy(theirs.id)


def banner_line(app: SwjobApp, instance: object) -> str:
    [line] = [line for line in banner(app).splitlines() if f"instance {instance} " in line]
    return line


async def _collect_beside(engine: Engine, api: StandIn, orphan: str, theirs: int) -> None:
    app = SwjobApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        # the banner offered "x to collect" for theirs too, and the start-up warning
        # "run `swjob gc`": neither collects it
        await until(pilot, lambda: f"instance {theirs} " in banner(app))
        await until(pilot, lambda: f"instance {orphan} " in banner(app))
        assert banner_line(app, orphan).endswith("— x to collect")
        their_line = banner_line(app, theirs)
        assert their_line.endswith("operator 0badc0de's, not ours: left alone"), their_line
        [warned] = [t for t in toasts(app) if f"instance {theirs} " in t]
        assert "swjob gc" not in warned, warned
        await pilot.press("x")
        screen = app.screen
        assert isinstance(screen, OrphansScreen)
        await until(pilot, lambda: screen.found is not None)
        shown = screen_text(app)
        assert f"instance {orphan}" in shown and f"instance {theirs}" in shown
        assert "collect all" not in shown and "collect 2" not in shown, shown
        assert "collecting destroys 1, leaves 1 operator 0badc0de's, not ours" in shown, shown

        await pilot.press("y")
        done = f"collected 1 of 1: instance {orphan} (run run-crashed)"
        await until(pilot, lambda: any(done in t for t in toasts(app)))
        [said] = [t for t in toasts(app) if done in t]
        left = f"left 1: instance {theirs} (run run-theirs) — operator 0badc0de's, not ours"
        assert left in said and "nothing left billing" not in said, said
        assert set(api.cloud.instances) == {theirs} and Ledger().open_entries() == []
        await until(pilot, lambda: f"instance {orphan} " not in banner(app))
        assert banner(app) == f"⚠ orphaned node: {their_line.removeprefix('⚠ orphaned node: ')}"

        await pilot.press("x")  # only theirs is left: nothing to collect, y does nothing
        screen = app.screen
        assert isinstance(screen, OrphansScreen)
        await until(pilot, lambda: screen.found is not None)
        shown = screen_text(app)
        assert "nothing here is ours to collect: 1 operator 0badc0de's, not ours" in shown
        assert "collecting destroys" not in shown, shown
        await pilot.press("y", "enter")
        assert app.screen is screen and set(api.cloud.instances) == {theirs}
        await pilot.press("escape")
        assert isinstance(app.screen, BoardScreen)


async def test_an_account_that_cannot_be_listed_is_said_in_the_modal(
    engine, api, monkeypatch
) -> None:
    app = SwjobApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        wrong = "revoked-key-" + "q" * 20
        monkeypatch.setenv("VAST_API_KEY", wrong)  # refused (401), which no retry mends
        await pilot.press("x")
        await until(pilot, lambda: "list orphaned nodes: Vast.ai" in screen_text(app))
        assert "HTTP 401" in screen_text(app)
        assert wrong not in screen_text(app) and api.api_key not in screen_text(app)
        await pilot.press("escape")
        assert isinstance(app.screen, BoardScreen)


async def test_a_run_on_a_rented_node_shows_cost_offer_and_missing_outputs(
    engine, api, make_job, tmp_path
) -> None:
    """Cost ticks on the board while the job runs (the engine publishes it every 5 s);
    the detail splits it by phase and names the offer; what matched nothing is listed."""
    release = tmp_path / "release"
    job = make_job(
        name="rented",
        run=f"echo 42 > result.txt && while [ ! -e {release} ]; do sleep 0.05; done",
        outputs=["result.txt", "nope.txt"],
    )
    app = SwjobApp(engine, jobs=[job], pool="gpu")
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        table = app.screen.query_one(JobsTable)
        await until(pilot, lambda: str(table.get_cell(run_id, "cost")).startswith("$"))
        assert not engine.run(run_id).terminal  # live, not only the final figure
        release.touch()

        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen)
        assert (await finished(app, run_id)).state == "COMPLETED"
        # the summary grows a line at a time (the final cost comes with the teardown)
        await until(pilot, lambda: "nope.txt" in screen_text(app) and "run $" in screen_text(app))
        shown = screen_text(app)
        assert "RTX 3090" in shown and "$0.22/h" in shown and "reliability" in shown
        assert "offer 103" in shown
        assert "provisioning $" in shown and "run $" in shown and "cost $" in shown
        assert "missing outputs: nope.txt" in shown

        await pilot.press("o")
        assert isinstance(app.screen, OutputsScreen)
        await until(pilot, lambda: "result.txt" in screen_text(app))
        assert "missing outputs (matched nothing): nope.txt" in screen_text(app)
    assert api.cloud.instances == {}


async def test_at_80x24_why_a_rented_run_failed_stays_in_view(engine, api, make_job) -> None:
    """The node's offer wraps to two lines at 80 columns and the cost adds one: the board's
    preview and the short detail still show the reason, and the detail its cost."""
    job = make_job(name="broke", run="exit 3")
    app = SwjobApp(engine, jobs=[job], pool="gpu")
    async with app.run_test(size=(80, 24)) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        assert (await finished(app, run_id)).reason == "run exited with code 3"
        await until(pilot, lambda: "node 7001  gone" in screen_text(app))
        assert "FAILED: run exited with code 3" in screen_text(app)
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen)
        await until(pilot, lambda: "FAILED · done" in screen_text(app))
        assert "FAILED: run exited with code 3" in screen_text(app)
        assert "cost $" in screen_text(app)
    assert api.cloud.instances == {}
