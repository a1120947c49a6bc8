"""The outputs browser: the run's landing directory as a tree, a preview of the file
under the cursor, and `e`/`v` to open it in $EDITOR/$PAGER with the app suspended."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text, TextType
from textual import on, work
from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DirectoryTree, Footer, Header, Static, Tree

from engine.api import RunView, printable
from tui.widgets.preview import incomplete_pull, load_manifest, preview


class OutputsTree(DirectoryTree):
    """The landing directory; a file's name is the job's data, drawn, never obeyed, and
    shown with the job's secrets masked (the file keeps its real name on disk)."""

    def __init__(self, path: Path, mask: Callable[[str], str] = str, **kwargs: Any) -> None:
        self._mask = mask
        super().__init__(path, **kwargs)

    def process_label(self, label: TextType) -> Text:
        if isinstance(label, str):
            label = printable(self._mask(label))
        return super().process_label(label)


def run_external(command: list[str]) -> str | None:
    """Run a program the user chose ($EDITOR, $PAGER) in the foreground; what went wrong,
    in one line, or None when it ran and exited 0."""
    try:
        code = subprocess.run(command, check=False).returncode
    except OSError as exc:
        return f"cannot start {command[0]}: {exc.strerror or exc}"
    return None if code == 0 else f"{command[0]} exited with code {code}"


class OutputsScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back", id="swjob.outputs.back"),
        Binding(
            "e",
            "open('EDITOR')",
            "Edit",
            tooltip="Open the file in $EDITOR",
            id="swjob.outputs.open_editor",
        ),
        Binding(
            "v",
            "open('PAGER')",
            "Page",
            tooltip="Open the file in $PAGER",
            id="swjob.outputs.open_pager",
        ),
        Binding("j", "cursor('down')", "Down", show=False, id="swjob.outputs.cursor_down"),
        Binding("k", "cursor('up')", "Up", show=False, id="swjob.outputs.cursor_up"),
    ]

    def __init__(self, run: RunView, mask: Callable[[str], str] = str) -> None:
        super().__init__()
        self.run = run
        self.mask = mask
        self.manifest: dict[str, dict[str, Any]] = {}
        self.path: Path | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        missing = self.run.missing_outputs
        if missing:
            yield Static(f"⚠ missing outputs (matched nothing): {', '.join(missing)}", id="missing")
        if warning := incomplete_pull(self.run.run_dir):
            yield Static(warning, id="incomplete")
        with Horizontal():
            yield OutputsTree(self.run.run_dir, self.mask, id="tree")
            with VerticalScroll(id="preview-scroll"):
                yield Static("select a file", id="preview")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"outputs · {self.run.job_name} · {self.run.run_id}"
        self.manifest = load_manifest(self.run.run_dir)
        tree = self.query_one(DirectoryTree)
        tree.focus()
        tree.call_later(self._open_outputs)  # after the tree's own first load of the root

    @work(group="tree", exit_on_error=False, description="open outputs/")
    async def _open_outputs(self) -> None:
        """Start where the user is going anyway: outputs/ open, its first file previewed."""
        tree = self.query_one(DirectoryTree)
        if not tree.root.children:
            await tree.reload_node(tree.root)
        node = next((n for n in tree.root.children if str(n.label) == "outputs"), None)
        while node is not None and node.allow_expand:
            await tree.reload_node(node)
            files = [child for child in node.children if not child.allow_expand]
            node = files[0] if files else next(iter(node.children), None)
        if node is not None:
            tree.move_cursor(node, animate=False)

    @on(Tree.NodeHighlighted)
    def _highlighted(self, event: Tree.NodeHighlighted[Any]) -> None:
        entry = event.node.data
        if entry is not None:
            self.path = entry.path
            self._preview(entry.path)

    @work(thread=True, exclusive=True, group="preview", exit_on_error=False)
    def _preview(self, path: Path) -> None:
        rel = (
            path.relative_to(self.run.run_dir / "outputs").as_posix()
            if self._in_outputs(path)
            else None
        )
        entry = self.manifest.get(self.mask(rel)) if rel else None  # its paths are masked
        renderable = preview(path, entry, self.mask)
        self.app.call_from_thread(self.query_one("#preview", Static).update, renderable)

    def _in_outputs(self, path: Path) -> bool:
        return path.is_relative_to(self.run.run_dir / "outputs")

    def action_cursor(self, direction: str) -> None:
        tree = self.query_one(DirectoryTree)
        if direction == "down":
            tree.action_cursor_down()
        else:
            tree.action_cursor_up()

    def action_open(self, variable: str) -> None:
        if self.path is None or self.path.is_dir():
            self.notify("Select a file first", severity="warning")
            return
        default = "less" if variable == "PAGER" else "vi"
        try:
            command = shlex.split(os.environ.get(variable) or default)
        except ValueError as exc:
            self.notify(f"${variable} cannot be parsed: {exc}", severity="error")
            return
        if not command:
            command = [default]
        try:
            with self.app.suspend():
                problem = run_external([*command, str(self.path)])
        except SuspendNotSupported:
            self.notify(f"Cannot suspend the console here to run ${variable}", severity="warning")
            return
        if problem is not None:
            self.notify(f"${variable}: {problem}", title="open failed", severity="error")
