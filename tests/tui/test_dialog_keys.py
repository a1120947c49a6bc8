"""A dialog's keys are shown once: in its footer, generated from its bindings.

Each dialog also wrote them by hand ("y/enter stop · n/esc cancel" above a footer saying
"y Stop it n Cancel"; buttons "Cancel (esc)" above "esc Cancel"), so every key showed
twice, and the two could disagree. The footer names every key of an action now
("y/⏎ Stop it"), and the dialog's body names none.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from textual.containers import Vertical
from textual.screen import Screen

from engine.providers.gc import Orphan
from engine.report.views import RunView
from tests.tui.conftest import booted, screen_rows, until
from tui.app import SwjobApp
from tui.live import ForwardScreen
from tui.screens.modals import ConfirmStopScreen, QuitScreen
from tui.screens.orphans import OrphansScreen

AT = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
RUN = RunView(
    run_id="20260102-120000-0001", job_name="trainer", pool="local", state="RUNNING",
    phase="run", created=AT, updated=AT, run_dir=Path("/runs/trainer/20260102-120000-0001"),
)  # fmt: skip
HINTS = ("esc", "⏎", "enter", "y/", "n/", " (s)", " (l)")
"""How a key is written when a dialog's body names it."""


async def _orphans() -> list[Orphan]:
    return [Orphan("gpu", "run-a", "4242", "running", 60.0, abandoned=True)]


DIALOGS: dict[str, tuple[Callable[[], Screen[object]], str]] = {
    "stop": (lambda: ConfirmStopScreen(RUN), "y/⏎ Stop it n/esc Cancel"),
    "quit": (lambda: QuitScreen([RUN]), "s Stop all and tear down l Leave running esc/c Cancel"),
    "orphans": (lambda: OrphansScreen(_orphans), "y/⏎ Destroy them n/esc Cancel"),
    "forward": (lambda: ForwardScreen(RUN), "⏎ Forward esc Cancel"),
}


@pytest.mark.parametrize("name", DIALOGS)
async def test_a_dialog_shows_each_of_its_keys_once(name: str, engine) -> None:
    make, footer = DIALOGS[name]
    app = SwjobApp(engine, jobs=[])
    async with app.run_test(size=(80, 24)) as pilot:
        await booted(pilot)
        dialog = make()
        app.push_screen(dialog)
        await until(pilot, lambda: app.screen is dialog)
        await until(pilot, lambda: screen_rows(app)[-1:] == [footer.ljust(80)])
        box = dialog.query_one(Vertical).region
        body = "\n".join(row[box.x : box.right] for row in screen_rows(app)[box.y : box.bottom])
        assert not [hint for hint in HINTS if hint in body], body


async def test_the_forward_dialogs_enter_forwards_the_port_typed(engine) -> None:
    """Enter is the dialog's key now (so that its footer names it), not the field's."""
    app = SwjobApp(engine, jobs=[])
    async with app.run_test(size=(80, 24)) as pilot:
        await booted(pilot)
        answers: list[tuple[int, int] | None] = []
        dialog = ForwardScreen(RUN)
        app.push_screen(dialog, answers.append)
        await until(pilot, lambda: app.screen is dialog)
        await pilot.press("x", "enter")
        await until(pilot, lambda: any("type the node's port" in row for row in screen_rows(app)))
        assert app.screen is dialog and answers == []
        await pilot.press("backspace", *"6006 9000", "enter")
        await until(pilot, lambda: answers == [(6006, 9000)])


async def test_the_orphans_dialog_offers_to_destroy_only_what_it_found(engine) -> None:
    async def nothing() -> list[Orphan]:
        return []

    app = SwjobApp(engine, jobs=[])
    async with app.run_test(size=(80, 24)) as pilot:
        await booted(pilot)
        dialog = OrphansScreen(nothing)
        app.push_screen(dialog)
        await until(pilot, lambda: any("no orphaned nodes" in row for row in screen_rows(app)))
        await until(pilot, lambda: "Cancel" in screen_rows(app)[-1])
        assert "Destroy" not in screen_rows(app)[-1]
