"""UI test fixtures: a real engine on the local pool, the real app around it.

The app starts the engine in its boot worker and closes it on unmount, so a test
that leaves `run_test` has torn down every node it started.
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import DirectoryTree

from engine.engine import Engine
from engine.jobs.jobspec import JobSpec
from engine.report.views import RunView
from engine.state.store import Store
from tests.support.engines import engine_config
from tests.support.waiting import eventually_async
from tui import history
from tui.app import SwjobApp
from tui.screens.outputs import OutputsScreen

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "examples" / "hello" / "job.toml"
RECORDED = Path(__file__).parent / "data" / "runs"
"""Two recorded runs, for console tests where a run's being live is no part of it."""
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


def with_history(engine: Engine, recorded: Path) -> Engine:
    """The engine with the runs recorded under `recorded` (landing dirs whose events say
    {RUN_DIR} for where they land) as its history: copied where a real engine finds them,
    their summaries in the run index."""
    runs_dir = engine.config.runs_dir
    shutil.copytree(recorded, runs_dir)
    store = Store()
    for events in sorted(runs_dir.glob("*/*/events.jsonl")):
        events.write_text(events.read_text().replace("{RUN_DIR}", str(events.parent)))
        view = history.load(events.parent, 10).view
        assert view is not None
        store.save(view)
    store.close()
    return engine


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


OUTCOMES = (
    (None, 0),
    ("run exited with code 3", 3),
    ("setup failed with code 1", None),
    ("cap reached: max_dollars $0.01 (spent $0.0100)", None),
    ("stopped by operator", None),
    ("node lost: agent process exited with code -9", None),
)
"""How the board's recorded runs end: completed, or failed for each kind of reason."""


def many_runs(recorded: Path, into: Path, count: int) -> Path:
    """`count` runs made from the recorded hello run under `recorded`, a minute apart,
    named as a sweep's variants (long names) and ending in every way OUTCOMES lists."""
    import json

    source = next((recorded / "hello").iterdir())
    for i in range(count):
        run_id = f"20260102-11{i:02d}00-{i:04d}"
        name = f"sweep-lr-3e-4-batch-{2 ** (i % 6 + 4)}-seed-{i}" if i % 3 else f"job-{i}"
        target = into / name / run_id
        shutil.copytree(source, target)
        reason, code = OUTCOMES[i % len(OUTCOMES)]
        lines = []
        for raw in (source / "events.jsonl").read_text().splitlines():
            event = json.loads(raw.replace(source.name, run_id))
            stamp = datetime.fromisoformat(event["ts"]) - timedelta(minutes=count - i)
            event["ts"] = stamp.isoformat().replace("+00:00", "Z")
            if event["kind"] == "submitted":
                event["job_name"] = name
            if reason and event["kind"] in ("transition", "finished"):
                failed = {k: "FAILED" for k in ("to_state", "from_state", "state") if
                          event.get(k) == "COMPLETED"}  # fmt: skip
                event |= failed
                if failed and event.get("to_state", event.get("state")) == "FAILED":
                    event |= {"reason": reason, "exit_code": code}
            lines.append(json.dumps(event))
        (target / "events.jsonl").write_text("\n".join(lines) + "\n")
    return into
