"""UI test fixtures: a real engine on the local pool, the real app around it.

The app starts the engine in its boot worker and closes it on unmount, so a test
that leaves `run_test` has torn down every node it started.
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import DirectoryTree

from engine.engine import Engine
from engine.jobs.jobspec import JobSpec
from engine.report.views import RunView
from tests.support.engines import engine_config
from tests.support.recorded import (  # noqa: F401  (the board's tests take them from here)
    RECORDED,
    many_runs,
    with_history,
)
from tests.support.waiting import eventually_async
from tui.app import SwjobApp
from tui.screens.outputs import OutputsScreen

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "examples" / "hello" / "job.toml"
HELLO_RUN, TRAINER = "20260102-110000-0011", "20260102-120000-0022"  # RECORDED, oldest first
SIZE = (130, 40)
FIXED_NOW = datetime(2026, 1, 2, 12, 0, 30, tzinfo=UTC)


def fixed_clock() -> datetime:
    return FIXED_NOW


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    """Not started: the app starts it in its boot worker and closes it on unmount."""
    return Engine(engine_config(tmp_path / "runs"))


@pytest.fixture
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
def make_job(make_job: Callable[..., JobSpec]) -> Callable[..., JobSpec]:
    """Each job in a folder of its own, named after it, as a user keeps them."""
    return lambda **fields: make_job(folder=f"job-{fields.get('name', 't')}", **fields)


async def until(pilot: Pilot, condition: Callable[[], object], timeout: float = 30) -> None:
    """Let the app run until `condition()` holds (a UI state, not a fixed delay)."""
    await eventually_async(condition, timeout, what=repr(condition), pause=pilot.pause)


async def finished(app: SwjobApp, run_id: str, timeout: float = 30) -> RunView:
    """The run's final view, once the engine says it is over."""
    return await asyncio.wait_for(app.engine.wait(run_id), timeout)  # type: ignore[attr-defined]


def screen_text(app: SwjobApp) -> str:
    """What the terminal shows, as text (from the SVG export: entities and nbsp undone)."""
    svg = app.export_screenshot()
    return html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")


def screen_rows(app: App[object]) -> list[str]:
    """What the terminal shows, row by row as laid out (every column, spaces included)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def tree_labels(tree: DirectoryTree) -> list[str]:
    """Every label of a directory tree's loaded nodes (open or not)."""
    labels, todo = [], [tree.root]
    while todo:
        node = todo.pop()
        labels.append(str(node.label))
        todo.extend(node.children)
    return labels


def toasts(app: SwjobApp) -> list[str]:
    return [note.message for note in app._notifications]


async def booted(pilot: Pilot) -> SwjobApp:
    app = pilot.app
    assert isinstance(app, SwjobApp)
    await asyncio.wait_for(app.booted.wait(), 60)  # a guard: an engine starting under load
    await pilot.pause()
    return app


async def opened_outputs(pilot: Pilot, first: str) -> OutputsScreen:
    """The outputs browser of the board's run, opened once the run finished and waited on
    until the cursor is on `first` (where it opens)."""
    app = await booted(pilot)
    await finished(app, app.engine.runs()[0].run_id)  # type: ignore[attr-defined]
    await pilot.press("o")
    screen = app.screen
    assert isinstance(screen, OutputsScreen)
    await until(pilot, lambda: screen.path is not None and screen.path.name == first)
    return screen
