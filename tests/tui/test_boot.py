"""The job detail's boot timeline: under the row that entered provisioning, each boot step
with how long reaching it took, then the whole boot and the steps the node never showed.

A recorded Vast.ai run (`data/boot`: every step, with the times of a cached-image boot)
is snapshotted; a real run on the local pool shows its two steps and the others as not
seen."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from engine.engine import Engine
from engine.jobs.jobspec import load_job
from engine.report import boot
from tests.tui.conftest import (
    HELLO,
    SIZE,
    booted,
    finished,
    fixed_clock,
    screen_text,
    until,
    with_history,
)
from tui.app import SwjobApp
from tui.screens.detail import DetailScreen

DATA = Path(__file__).parent / "data" / "boot"
LABELS = list(boot.LABELS.values())  # the words; tests/integration pins them
NEW_NODE = [  # a warm node's reuse is not one; the recording predates the pre-flight
    boot.LABELS[phase] for phase in boot.STEPS if phase is not boot.BootPhase.PREFLIGHT
]

pytestmark = pytest.mark.usefixtures("utc")


@pytest.fixture
def recorded(engine: Engine) -> Engine:
    """The engine with the recorded Vast.ai run as its history."""
    return with_history(engine, DATA)


async def open_detail(pilot: Pilot) -> None:
    await booted(pilot)
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(pilot.app.screen, DetailScreen))
    await until(pilot, lambda: pilot.app.screen.query_one("#log").line_count == 2)


def test_job_detail_boot_timeline(snap_compare, recorded: Engine) -> None:
    app = SwjobApp(recorded, clock=fixed_clock)
    assert snap_compare(app, terminal_size=SIZE, run_before=open_detail)


def boot_rows(app: SwjobApp) -> dict[str, str]:
    """The timeline's boot rows by step: what follows the ` · ` marker of each."""
    lines = screen_text(app).splitlines()
    rows = [line.split("  · ", 1)[1].strip(" │") for line in lines if "  · " in line]
    names = [*LABELS, "not seen", "booted"]
    return {next(s for s in names if r.startswith(s)): r for r in rows}


async def test_the_recorded_vast_boot_reads_step_by_step(recorded: Engine) -> None:
    app = SwjobApp(recorded, clock=fixed_clock)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(pilot)
        rows = boot_rows(app)
        assert list(rows) == [*NEW_NODE, "booted"]
        pull = rows["container running"]
        assert "38s" in pull and "success, running pytorch" in pull
        assert "4s" in rows["agent installed"]  # timed on the node: 45.8 → 50.4
        assert "51s" in rows["booted"] and "not seen" not in " ".join(rows.values())


async def test_a_local_run_shows_its_two_steps_and_no_rented_ones(engine: Engine) -> None:
    """A local node has no offer, image or install: its timeline does not list them as
    "not seen" (they never could be)."""
    app = SwjobApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run_id = await engine.submit(load_job(HELLO), "local")
        assert (await finished(app, run_id)).state == "COMPLETED"
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        await until(pilot, lambda: "booted" in boot_rows(app))
        rows = boot_rows(app)
        assert list(rows) == ["instance created", "agent joined", "booted"]
        assert "swjob-agent process" in rows["instance created"]
        assert "offer chosen" not in screen_text(app) and "not seen" not in screen_text(app)
