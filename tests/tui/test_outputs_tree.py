"""The outputs browser's tree as the browser drives it: reloaded several times a second
while a run's outputs land, it keeps what was open and the cursor, and shows no file that
is still being landed."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from textual.app import App, ComposeResult

from tests.tui.conftest import until
from tui.screens.outputs import OutputsTree


class SlowListingTree(OutputsTree):
    """Lists a folder as a busy disk or a loaded machine does: long enough for the tree's
    message handlers to run while a reload is between resetting a folder and filling it."""

    def filter_paths(self, paths: Iterable[Path]) -> Iterable[Path]:
        time.sleep(0.05)  # in the tree's loading thread
        return super().filter_paths(paths)


class TreeApp(App[None]):
    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def compose(self) -> ComposeResult:
        yield SlowListingTree(self.root)


def lines(tree: OutputsTree) -> list[str]:
    return [str(tree.get_node_at_line(i).label) for i in range(tree.last_line + 1)]


async def test_back_to_back_reloads_keep_open_folders_and_the_cursor(tmp_path: Path) -> None:
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "out.txt").write_text("data\n")
    (tmp_path / "outputs" / ".next.txt.swjob-tmp").write_text("half of it")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "run.log").write_text("a log\n")
    app = TreeApp(tmp_path)
    async with app.run_test() as pilot:
        tree = app.query_one(OutputsTree)
        await tree.reload()
        outputs = next(n for n in tree.root.children if str(n.label) == "outputs")
        await tree.reload_node(outputs)
        assert lines(tree)[1:] == ["logs", "outputs", "out.txt"]  # no file mid-landing
        _ = tree.last_line
        tree.move_cursor(outputs.children[0])
        for _ in range(10):  # each reload opens the root again: that must not close outputs/
            await tree.reload()  # at once: the last one's handlers run during this one
            assert lines(tree)[1:] == ["logs", "outputs", "out.txt"]
            assert tree.cursor_node is not None and str(tree.cursor_node.label) == "out.txt"
        await pilot.pause(0.2)  # the handlers of the last reload have run
        assert lines(tree)[1:] == ["logs", "outputs", "out.txt"]
        tree.root.children[0].expand()  # a folder the user opens is still loaded
        await until(pilot, lambda: lines(tree)[1:] == ["logs", "run.log", "outputs", "out.txt"])
