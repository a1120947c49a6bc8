"""The outputs browser lays out one preview at a time, the latest asked for: a large
output's layout takes a core for half a second in a thread that cannot be stopped, and a
cursor moving through the files had several running at once, holding the interpreter
while the console's loop (keys, the engine) waited its turn."""

from __future__ import annotations

import gc
import threading
from typing import Any

from rich.console import Console
from rich.style import Style
from rich.text import Text

from tests.tui.conftest import opened_outputs, until
from tui.app import SwjobApp
from tui.screens import outputs
from tui.widgets.preview_pane import PreviewPane, lay_out


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
    real = outputs.lay_out

    def counted(*args: Any) -> Any:
        with lock:
            at_once.add(threading.get_ident())
            most[0] = max(most[0], len(at_once))
        try:
            return real(*args)
        finally:
            with lock:
                at_once.discard(threading.get_ident())

    monkeypatch.setattr(outputs, "lay_out", counted)
    app = SwjobApp(engine, jobs=[job])
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await opened_outputs(pilot, "a.txt")
        for key in ("j", "k", "j", "j", "k", "j"):  # faster than a layout: a.txt → b.txt → c.txt
            await pilot.press(key)
        assert screen.path is not None and screen.path.name == "c.txt"
        pane = screen.query_one(PreviewPane)
        await until(pilot, lambda: pane.render_line(0).text.startswith("c.txt"))
    assert most[0] == 1


def test_a_preview_is_measured_where_it_is_laid_out_and_weighs_nothing_on_collections() -> None:
    """The pane needs the widest line: measuring thousands of lines took the loop 10-80 ms,
    so the thread measures them. And what the pane keeps is out of the garbage collector's
    sight: a large preview kept as Strips was ~90 k objects every full collection walked."""
    laid = lay_out(Text("a\nbb\nccc", style="bold"), Console(width=40), 40)
    assert laid.width == 3
    assert [laid.strip(i).text for i in range(3)] == ["a", "bb", "ccc"]
    assert laid.strip(0)._segments[0].style == Style(bold=True)
    big = lay_out(Text("\n".join(f"line {i}" for i in range(3000))), Console(width=40), 40)
    assert len(big.texts) == 3000 and len(_walked(big)) < 12  # a handful, not 3000 of them


def _walked(root: object) -> list[object]:
    """The objects a garbage collection walks when it looks at `root` (and `root`), its
    class and what that leads to aside."""
    seen, todo = {id(root): root}, [root]
    while todo:
        for child in gc.get_referents(todo.pop()):
            if gc.is_tracked(child) and id(child) not in seen and not isinstance(child, type):
                seen[id(child)] = child
                todo.append(child)
    return list(seen.values())
