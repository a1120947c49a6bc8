"""The outputs browser: the run's landing directory as a tree, a preview of the file
under the cursor, and enter/`v`/`e` to open it in $PAGER/$EDITOR with the app suspended.

It is live: while the run goes on, each change of its view (a step ends, the output
pull lands files, the run finishes) reloads the tree — keeping what was open and the
cursor — and the warnings above it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich.text import Text, TextType
from textual import on, work
from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DirectoryTree, Header, Input, Static, Tree
from textual.widgets.directory_tree import DirEntry
from textual.worker import Worker

from engine.api import RunView, SubmitError, is_in_flight, outputs_where, printable
from tui.api import EngineAPI
from tui.messages import RunsUpdated
from tui.widgets.footer import Footer
from tui.widgets.preview import incomplete_pull, load_manifest, preview
from tui.widgets.preview_pane import LaidOut, PreviewPane, collections_paused, lay_out


class OutputsTree(DirectoryTree):
    """The landing directory; a file's name is the job's data, drawn, never obeyed, and
    shown with the job's secrets masked (the file keeps its real name on disk). A file
    still being landed (its hidden temporary name) is not shown: it is not an output yet,
    and a cursor put on it would be left on its folder when it is renamed."""

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, id="swjob.outputs.cursor_down"),
        Binding("k", "cursor_up", "Up", show=False, id="swjob.outputs.cursor_up"),
    ]

    def __init__(self, path: Path, mask: Callable[[str], str] = str, **kwargs: Any) -> None:
        self._mask = mask
        self.term = ""  # `/`: only files whose name holds it (folders stay, to open)
        super().__init__(path, **kwargs)

    def filter_paths(self, paths: Iterable[Path]) -> Iterable[Path]:
        shown = [path for path in paths if not is_in_flight(path.name)]
        if self.term:
            term = self.term.lower()
            shown = [p for p in shown if p.is_dir() or term in self._mask(p.name).lower()]
        return shown

    async def _on_tree_node_expanded(self, event: Tree.NodeExpanded[DirEntry]) -> None:
        """Leave a folder the tree has loaded, or is reloading, to that load.

        Every reload opens the folders it reloads, and DirectoryTree's own handler for
        that queues the folder for loading if, one thread hop later, it is not loaded. By
        then the browser's next reload may have reset it (a run's outputs change several
        times a second as they land): the queued load then replaced the folder's children
        with fresh, closed ones — outputs/ closed again, and the node the browser was
        putting the cursor on gone from the tree, so the cursor fell to the top line."""
        entry = event.node.data
        if entry is not None and (entry.loaded or self.lock.is_locked):
            event.prevent_default()
            event.stop()

    def process_label(self, label: TextType) -> Text:
        if isinstance(label, str):
            label = printable(self._mask(label))
        return super().process_label(label)


def sink_line(run: RunView) -> str:
    """Where the outputs live when the run has a sink: said, with `p` when only there."""
    where = outputs_where(run)
    if where == "sink":
        return f"outputs in the sink only: {run.sink} — d downloads them here, verified"
    return f"outputs also in the sink: {run.sink}" if where == "both" else ""


MIN_WIDTH = 20
"""Cells a preview is laid out in before the pane has a size of its own."""


def outputs_key(run: RunView) -> tuple[object, ...]:
    """What changes the landing directory: a new state or step, files landing."""
    pull = run.transfers.get("pull")
    return (run.state, run.phase, pull.files_done if pull else -1, run.missing_outputs)


def run_external(command: list[str]) -> str | None:
    """Run a program the user chose ($EDITOR, $PAGER) in the foreground; what went wrong,
    in one line, or None when it ran and exited 0."""
    try:
        code = subprocess.run(command, check=False).returncode
    except OSError as exc:
        return f"cannot start {command[0]}: {exc.strerror or exc}"
    return None if code == 0 else f"{command[0]} exited with code {code}"


class OutputsFilter(Input):
    """The outputs' `/` filter: typing narrows the tree, enter keeps it, esc clears it."""

    BINDINGS = [Binding("escape", "clear", "Clear filter", show=False, id="swjob.outputs.clear")]

    def action_clear(self) -> None:
        self.value = ""
        self.display = False
        self.screen.query_one(OutputsTree).focus()


class OutputsScreen(Screen[None]):
    BINDINGS = [
        Binding("escape", "back", "Back", id="swjob.outputs.back"),
        Binding(
            "slash",
            "filter",
            "Filter",
            key_display="/",
            show=False,  # in ? (the footer keeps ? and q at 80 columns)
            tooltip="Show only the files whose name holds what is typed",
            id="swjob.outputs.filter",
        ),
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
        Binding(
            "d",
            "pull",
            "Download",
            tooltip="Land the run's outputs here from its sink, verified (swjob pull)",
            id="swjob.outputs.pull",
        ),
    ]

    def __init__(self, engine: EngineAPI, run: RunView, mask: Callable[[str], str] = str) -> None:
        super().__init__()
        self.engine, self.run = engine, run
        self.mask = mask
        self.manifest: dict[str, dict[str, Any]] = {}
        self.path: Path | None = None
        self._shown = outputs_key(run)
        self._stale = False  # the run changed since the tree was last loaded
        self._loader: Worker[None] | None = None
        self._landed = False  # outputs/ had a file to put the cursor on
        self._wanted: tuple[Path, int] | None = None  # a preview asked for, not yet begun
        self._rendering = False  # a preview is being laid out (one at a time)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="missing")
        yield Static("", id="incomplete")
        bar = OutputsFilter(placeholder="show only files whose name holds… (esc clears)")
        bar.display = False
        yield bar
        yield Static("", id="sink")
        with Horizontal():
            yield OutputsTree(self.run.run_dir, self.mask, id="tree")
            yield PreviewPane(id="preview-scroll")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"outputs · {self.run.job_name} · {self.run.run_id}"
        self._warn()
        tree = self.query_one(DirectoryTree)
        tree.focus()
        tree.call_later(self._first_load)  # after the tree's own load of the root

    def _first_load(self) -> None:
        self._loader = self._follow(first=True)

    def _warn(self) -> None:
        """The lines above the tree, from the run's view and its manifest as they are now."""
        self.manifest = load_manifest(self.run.run_dir)
        missing = self.run.missing_outputs
        text = f"⚠ missing outputs (matched nothing): {', '.join(missing)}" if missing else ""
        lines = (
            ("#missing", text),
            ("#incomplete", incomplete_pull(self.run.run_dir)),
            ("#sink", sink_line(self.run)),
        )
        for id_, line in lines:
            widget = self.query_one(id_, Static)
            widget.update(line or "")
            widget.display = bool(line)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pull":  # a run with a sink (hidden without), once its outputs are final
            return (self.run.terminal or None) if self.run.sink else False
        return True

    @work(group="pull", exclusive=True, exit_on_error=False, description="pull from the sink")
    async def action_pull(self) -> None:
        """Land the outputs from the sink (a run whose laptop copy is gone, or never came),
        then show them: the tree reloads once they are in outputs/."""
        self.notify(f"Pulling from {self.run.sink} …")
        try:
            said = await self.engine.pull_outputs(self.run.run_id)
        except SubmitError as exc:
            self.notify(str(exc), title="pull failed", severity="error")
            return
        self.notify(said, title="pulled")
        self._stale, self._landed = True, False
        self._warn()
        if self._loader is None or self._loader.is_finished:
            self._loader = self._follow()

    @on(RunsUpdated)
    def _updated(self) -> None:
        """Follow the run: reload the tree and the warnings when its outputs may have
        changed. (The board redraws every run when it is shown again.)"""
        run = self.engine.run(self.run.run_id)
        if run is None or outputs_key(run) == self._shown:
            return
        self.run, self._shown, self._stale = run, outputs_key(run), True
        self._warn()
        if self._loader is None or self._loader.is_finished:
            self._loader = self._follow()

    @work(group="tree", exit_on_error=False, description="load outputs/")
    async def _follow(self, first: bool = False) -> None:
        """Load the tree, then reload it while the run keeps changing. One loader at a
        time: two reloads racing each put the cursor back where they found it. A reload
        keeps open folders and the cursor; until outputs/ had a file, its first file is
        put under the cursor."""
        tree = self.query_one(DirectoryTree)
        while first or self._stale:
            if not first:
                self._stale = False
                await tree.reload()
            first = False
            if not self._landed:
                self._landed = await self._open_outputs()
            elif self.path is not None and self.path.is_file():
                self._show(self.path)  # the file may have grown

    async def _open_outputs(self) -> bool:
        """Start where the user is going anyway: outputs/ open, its first file previewed.
        Whether the cursor is now on that file (not when outputs/ has none yet)."""
        tree = self.query_one(DirectoryTree)
        if not tree.root.children:
            await tree.reload_node(tree.root)
        node = next((n for n in tree.root.children if str(n.label) == "outputs"), None)
        while node is not None and node.allow_expand:
            await tree.reload_node(node)
            files = [child for child in node.children if not child.allow_expand]
            node = files[0] if files else next(iter(node.children), None)
        if node is not None:
            _ = tree.last_line  # lays out the tree's lines: a node just loaded gets its line
            tree.move_cursor(node, animate=False)
        return node is not None and tree.cursor_node is node and not node.allow_expand

    @on(Tree.NodeHighlighted)
    def _highlighted(self, event: Tree.NodeHighlighted[Any]) -> None:
        entry = event.node.data
        if entry is not None:
            self.path = entry.path
            self._show(entry.path)

    def on_resize(self) -> None:
        """The preview is laid out for the pane's width: lay it out again."""
        if self.path is not None:
            self._show(self.path)

    def _show(self, path: Path) -> None:
        """Preview `path`: at once when no preview is being laid out, else once it is done.

        One at a time, the latest asked for: laying out a large output takes a core for
        half a second, and a thread cannot be stopped part way, so a cursor moving
        through the files would have several running at once (each shown, then
        replaced), holding the interpreter while the loop waits its turn."""
        pane = self.query_one(PreviewPane)
        self._wanted = (path, max(pane.scrollable_content_region.width, MIN_WIDTH))
        if not self._rendering:
            self._render_wanted()

    def _render_wanted(self) -> None:
        wanted, self._wanted = self._wanted, None
        self._rendering = wanted is not None
        if wanted is not None:
            self._preview(*wanted)

    def _rendered(self, lines: LaidOut | None) -> None:
        """A preview is laid out (None: it failed): shown unless another was asked for since."""
        if lines is not None and self._wanted is None:
            self.query_one(PreviewPane).show(lines)
        self._render_wanted()

    @work(thread=True, group="preview", exit_on_error=False)
    def _preview(self, path: Path, width: int) -> None:
        """Read the file and lay its preview out, all in this thread: a large output's
        preview takes far longer than a frame (see tui/widgets/preview_pane.py)."""
        lines: LaidOut | None = None
        try:
            rel = path.relative_to(self._outputs()).as_posix() if self._in_outputs(path) else None
            entry = self.manifest.get(self.mask(rel)) if rel else None  # its paths are masked
            with collections_paused():
                lines = lay_out(preview(path, entry, self.mask), self.app.console, width)
        finally:
            self.app.call_from_thread(self._rendered, lines)

    def _in_outputs(self, path: Path) -> bool:
        return path.is_relative_to(self._outputs())

    def _outputs(self) -> Path:
        """The run's outputs/ as the tree names its files: resolved, as Textual's tree lists
        a folder. A runs dir given as `../runs` (or under a symlink) otherwise matched no
        file: each said "not in manifest", its verification not shown."""
        return (self.run.run_dir / "outputs").resolve()

    def action_filter(self) -> None:
        bar = self.query_one(OutputsFilter)
        bar.display = True
        bar.focus()

    def action_back(self) -> None:
        """esc clears a filter first, then leaves."""
        bar = self.query_one(OutputsFilter)
        if bar.value:
            bar.action_clear()
        else:
            self.app.pop_screen()

    @on(Input.Changed)
    async def _filter_changed(self, event: Input.Changed) -> None:
        tree = self.query_one(OutputsTree)
        tree.term = event.value.strip()
        await tree.reload()
        tree.border_title = f"filter: {tree.term} · esc clears" if tree.term else ""

    @on(Input.Submitted)
    def _filter_done(self) -> None:
        self.query_one(OutputsFilter).display = False
        self.query_one(OutputsTree).focus()

    @on(DirectoryTree.FileSelected)
    def _file_selected(self, event: DirectoryTree.FileSelected) -> None:
        """enter (or a click) on a file opens it, as `v` does."""
        self.path = event.path
        self.action_open("PAGER")

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
