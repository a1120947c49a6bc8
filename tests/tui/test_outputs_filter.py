"""The outputs browser's `/` filter and a folder's preview, on a recorded run (the run
is not the subject): typing narrows the tree to the files whose name holds the term,
enter keeps it, esc clears it; a folder under the cursor shows its file count and size."""

from __future__ import annotations

from pathlib import Path

from tests.tui.conftest import (
    booted,
    fixed_clock,
    screen_text,
    tree_labels,
    until,
    with_history,
)
from tui.app import SwjobApp
from tui.screens.outputs import OutputsFilter, OutputsScreen, OutputsTree

DATA = Path(__file__).parent / "data" / "runs"


async def test_slash_filters_the_outputs_and_a_folder_says_what_it_holds(engine) -> None:
    app = SwjobApp(with_history(engine, DATA), clock=fixed_clock)
    async with app.run_test(size=(100, 30)) as pilot:
        await booted(pilot)
        await pilot.press("G", "o")
        screen = app.screen
        assert isinstance(screen, OutputsScreen)
        await until(pilot, lambda: screen.path is not None and screen.path.name == "hello.txt")
        tree = screen.query_one(OutputsTree)
        await pilot.press("slash", *"nomatch")
        await until(pilot, lambda: "hello.txt" not in tree_labels(tree))
        assert "outputs" in tree_labels(tree)  # folders stay, to be opened
        await pilot.press("enter")
        assert not screen.query_one(OutputsFilter).display and tree.has_focus
        assert "filter: nomatch" in str(tree.border_title)
        await pilot.press("escape")  # clears the filter, the browser stays
        assert app.screen is screen
        await until(pilot, lambda: "hello.txt" in tree_labels(tree))
        await pilot.press("slash", *"hello", "enter")
        await until(pilot, lambda: "hello.txt" in tree_labels(tree) and "logs" in tree_labels(tree))
        await pilot.press("escape")
        outputs = next(n for n in tree.root.children if str(n.label) == "outputs")
        tree.move_cursor(outputs, animate=False)
        await until(pilot, lambda: "outputs/  1 file, 3 B" in screen_text(app))
        assert "hello.txt" in screen_text(app)
        await pilot.press("escape")
        assert app.screen is not screen
