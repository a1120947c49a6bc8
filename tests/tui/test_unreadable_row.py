"""One row of the run index that cannot be read (a hostile node's numbers once wrote one
that no reader could parse) never stops the console at start: the run is left out, the
others are on the board."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from engine.state.store import Store
from tests.support.runs import unfinished_run
from tests.tui.conftest import SIZE, booted, screen_text, until
from tui.app import SwjobApp

GOOD, BAD = "20260101-000001-aaaaaaaa", "20260101-000002-bbbbbbbb"


def index_with_a_broken_row(runs: Path) -> None:
    """Two finished runs in the index, the second's summary unreadable."""
    for run_id in (GOOD, BAD):
        unfinished_run(runs, run_id)
    store = Store()
    with sqlite3.connect(store.path) as db:
        (text,) = db.execute("SELECT view FROM runs WHERE run_id = ?", (GOOD,)).fetchone()
        done = json.loads(text) | {"state": "COMPLETED", "phase": "done", "live": False}
        db.execute(
            "UPDATE runs SET terminal = 1, view = ? WHERE run_id = ?", (json.dumps(done), GOOD)
        )
        db.execute(
            "UPDATE runs SET terminal = 1, view = '{\"util_sum\": null}' WHERE run_id = ?", (BAD,)
        )
    store.close()


async def test_the_console_starts_and_lists_the_others(engine, tmp_path: Path) -> None:
    index_with_a_broken_row(tmp_path / "runs")
    app = SwjobApp(engine, jobs=[])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await until(pilot, lambda: GOOD[-8:] in screen_text(app))
        assert BAD[-8:] not in screen_text(app)
