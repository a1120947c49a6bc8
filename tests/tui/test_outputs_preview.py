"""The outputs browser lays out one preview at a time, the latest asked for: a large
output's layout takes a core for half a second in a thread that cannot be stopped, and a
cursor moving through the files had several running at once, holding the interpreter
while the console's loop (keys, the engine) waited its turn."""

from __future__ import annotations

import threading
from typing import Any

from rich.console import Console
from rich.text import Text

from tests.tui.conftest import booted, finished, until
from tui.app import SwjobApp
from tui.screens import outputs
from tui.screens.outputs import OutputsScreen
from tui.widgets.preview_pane import PreviewPane, render_strips


async def test_moving_through_large_outputs_lays_out_one_preview_at_a_time(
    engine, make_job, monkeypatch
) -> None:
    job = make_job(
        name="big",
        run="seq 1 9000 > a.txt; seq 1 9000 > b.txt; echo small > c.txt",
        outputs=["a.txt", "b.txt", "c.txt"],
    )
    at_once, most = set[int](), [0]
    lock = threading.Lock()
    real = outputs.render_strips

    def counted(*args: Any) -> Any:
        with lock:
            at_once.add(threading.get_ident())
            most[0] = max(most[0], len(at_once))
        try:
            return real(*args)
        finally:
            with lock:
                at_once.discard(threading.get_ident())

    monkeypatch.setattr(outputs, "render_strips", counted)
    app = SwjobApp(engine, jobs=[job])
    async with app.run_test(size=(100, 30)) as pilot:
        await booted(pilot)
        await finished(app, engine.runs()[0].run_id)
        await pilot.press("o")
        screen = app.screen
        assert isinstance(screen, OutputsScreen)
        await until(pilot, lambda: screen.path is not None and screen.path.name == "a.txt")
        for key in ("j", "k", "j", "j", "k", "j"):  # faster than a layout: a.txt → b.txt → c.txt
            await pilot.press(key)
        assert screen.path is not None and screen.path.name == "c.txt"
        pane = screen.query_one(PreviewPane)
        await until(pilot, lambda: pane.render_line(0).text.startswith("c.txt"))
    assert most[0] == 1


def test_the_thread_that_lays_a_preview_out_also_measures_its_lines() -> None:
    """The pane's `show` takes the widest line: measuring thousands of lines there took the
    loop 10-80 ms, so each strip leaves the thread with its width known (Strip caches it)."""
    strips = render_strips(Text("a\nbb\nccc"), Console(width=40), 40)
    assert [strip._cell_length for strip in strips] == [1, 2, 3]
