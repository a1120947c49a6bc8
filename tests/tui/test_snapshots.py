"""SVG snapshots of the main screens, built from recorded runs of the real local pool.

`data/runs` holds two runs recorded on the local pool (ids, times and host facts
normalised). They are put where a real engine finds its history — the landing dirs
under `runs_dir`, their summaries in the run index — and the app runs on that engine
with a fixed clock, so nothing on screen depends on when or where the test runs.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from engine.engine import Engine
from engine.store import Store
from tests.tui.conftest import SIZE, booted, fixed_clock, screen_text, until
from tui import history
from tui.app import SwjobApp
from tui.screens.modals import QuitScreen

DATA = Path(__file__).parent / "data"
HELLO_ID = "20260102-110000-0011"


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    """Times render in the local zone; pin it (and give the old one back)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.fixture
def recorded(engine: Engine) -> Engine:
    """The engine with the recorded runs as its history."""
    runs_dir = engine.config.runs_dir
    shutil.copytree(DATA / "runs", runs_dir)
    store = Store()
    for events in sorted(runs_dir.glob("*/*/events.jsonl")):
        events.write_text(events.read_text().replace("{RUN_DIR}", str(events.parent)))
        view = history.load(events.parent, 10).view
        assert view is not None
        store.save(view)
    store.close()
    return engine


async def test_board_keeps_persistent_alerts_in_view(recorded: Engine) -> None:
    """A node that could not be torn down stays on the board until someone acts on it."""
    from engine.events import Alert

    run_dir = next(recorded.config.runs_dir.glob("trainer/*"))
    alert = Alert(
        run_id=run_dir.name, seq=99, message="node local-x may still be billing", persistent=True
    )
    with (run_dir / "events.jsonl").open("a") as handle:
        handle.write(alert.model_dump_json() + "\n")
    view = history.load(run_dir, 10).view
    Store().save(view)

    app = app_on(recorded)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await until(pilot, lambda: "⚠ node local-x may still be billing" in screen_text(app))


def app_on(engine: Engine, cwd: Path | None = None) -> SwjobApp:
    return SwjobApp(engine, clock=fixed_clock, cwd=cwd)


async def no_blink(pilot: Pilot) -> None:
    for field in pilot.app.screen.query(Input):
        field.cursor_blink = False


def test_board(snap_compare, recorded: Engine) -> None:
    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await until(
            pilot, lambda: "trainer" in str(pilot.app.screen.query_one("#jobs").get_row_at(0))
        )

    assert snap_compare(app_on(recorded), terminal_size=SIZE, run_before=ready)


def test_job_detail(snap_compare, recorded: Engine) -> None:
    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await pilot.press("enter")
        await until(pilot, lambda: pilot.app.screen.query_one("#log").line_count == 3)

    assert snap_compare(app_on(recorded), terminal_size=SIZE, run_before=ready)


def test_job_detail_with_transfers(snap_compare, recorded: Engine) -> None:
    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await pilot.press("G", "enter")
        await until(pilot, lambda: pilot.app.screen.query_one("#log").line_count == 1)
        await until(pilot, lambda: pilot.app.screen.query("#transfer-pull"))
        await pilot.pause(0.2)

    assert snap_compare(app_on(recorded), terminal_size=SIZE, run_before=ready)


def test_outputs_browser(snap_compare, recorded: Engine) -> None:
    """It opens on outputs/ expanded with the first file selected and previewed."""

    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await pilot.press("G", "o")
        await until(
            pilot,
            lambda: (
                getattr(pilot.app.screen, "path", None)
                and pilot.app.screen.path.name == "hello.txt"
            ),
        )
        await until(pilot, lambda: "sha256" in screen_text(pilot.app))
        await pilot.pause(0.2)

    assert snap_compare(app_on(recorded), terminal_size=SIZE, run_before=ready)


def test_submit_modal(snap_compare, recorded: Engine) -> None:
    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await pilot.press("n", *"smoke.toml")
        await until(pilot, lambda: "smoke" in str(pilot.app.screen.query_one("#plan").content))
        await no_blink(pilot)

    app = app_on(recorded, cwd=DATA / "jobs")
    assert snap_compare(app, terminal_size=SIZE, run_before=ready)


def test_quit_modal(snap_compare, recorded: Engine) -> None:
    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        pilot.app.push_screen(QuitScreen(recorded.runs()[:1]))
        await pilot.pause()

    assert snap_compare(app_on(recorded), terminal_size=SIZE, run_before=ready)
