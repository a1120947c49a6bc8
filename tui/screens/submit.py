"""The submit modal: pick a job file (a tree of the cwd showing only .toml, or a typed
path) and a pool; problems show inline, one line naming the field, before anything
is rented. Enter on a file in the tree or in the path field submits (a click on a
file only fills the path). Submitting calls the engine from a worker and closes on
success."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.events import Key
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, DirectoryTree, Input, Label, Select, Static

from engine.api import JobFileError, JobSpec, Plan, load_job, plan_workspace
from tui import calls
from tui import format as fmt
from tui.api import EngineAPI
from tui.widgets.footer import Footer

SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", "swjob-runs"}


class TomlTree(DirectoryTree):
    """The working directory, showing only job-file candidates and the folders above them."""

    BINDINGS = [
        Binding("enter", "choose", "Submit this file", show=False, id="swjob.submit.choose")
    ]

    @dataclass
    class Chosen(Message):
        """Enter on a file: submit it."""

        path: Path

    def action_choose(self) -> None:
        node = self.cursor_node
        entry = node.data if node is not None else None
        if entry is not None and not entry.path.is_dir():
            self.action_select_cursor()  # fills the path field, as a click does
            self.post_message(self.Chosen(entry.path))
        else:
            self.action_select_cursor()  # a folder opens or closes

    def filter_paths(self, paths: Iterable[Path]) -> Iterable[Path]:
        return [
            p
            for p in paths
            if (
                p.is_dir()
                and p.name not in SKIP_DIRS
                and not p.name.startswith(".")
                and not p.name.endswith(".egg-info")
            )
            or p.suffix == ".toml"
        ]


def describe(job: JobSpec) -> str:
    parts = [f"✓ job {job.name}: run `{fmt.one_line(job.run, 60)}`"]
    if job.setup:
        parts.append("with setup")
    parts.append(f"workspace {job.workspace.workdir}" if job.workspace else "no workspace")
    if job.outputs:
        parts.append(f"outputs {', '.join(job.outputs)}")
    return " · ".join(parts)


def push_summary(plan: Plan) -> str:
    """The workspace push in one line, warnings after it: seen before anything is rented."""
    text = (
        f"push: {plan.files} files, {fmt.size(plan.bytes)} "
        f"(≈{fmt.size(plan.compressed_estimate)} compressed), {plan.excluded} excluded"
    )
    return "\n".join([text, *(f"⚠ {w}" for w in plan.warnings[:3])])


class SubmitScreen(ModalScreen[str | None]):
    VERTICAL_BREAKPOINTS = [(0, "-short"), (30, "-tall")]
    BINDINGS = [Binding("escape", "dismiss", "Cancel", id="swjob.submit.dismiss")]

    def __init__(self, engine: EngineAPI, pool: str, root: Path) -> None:
        super().__init__()
        self.engine, self.pool, self.root = engine, pool, root
        self._loads = 0  # loads started; only the newest one's result is shown

    def compose(self) -> ComposeResult:
        pools = [(p.name, p.name) for p in self.engine.pools()]
        with Vertical(classes="dialog submit"):
            yield Label("Submit a job", classes="title")
            yield TomlTree(self.root, id="files")
            yield Input(placeholder="path/to/job.toml (enter submits)", id="path")
            yield Select(pools, value=self.pool, allow_blank=False, id="pool")
            yield Static("", id="error")
            yield Static("", id="plan")
            with Horizontal(classes="buttons"):
                yield Button("Submit", id="submit", variant="primary")
                yield Button("Cancel", id="cancel")
        yield Footer(alternatives=True)  # this dialog's keys, over the screen's below

    def on_mount(self) -> None:
        self.query_one("#path", Input).focus()

    def on_key(self, event: Key) -> None:
        """Typing on the pool's select (tab from the path lands there) goes to the path:
        the select took the characters, and the path the user went on typing lost them."""
        select = self.query_one("#pool", Select)
        if select.has_focus and not select.expanded and event.is_printable and event.character:
            field = self.query_one("#path", Input)
            field.focus()
            field.insert_text_at_cursor(event.character)
            event.stop()

    @property
    def path(self) -> Path:
        """The typed path; a relative one is read from the directory the tree shows."""
        typed = self.query_one("#path", Input).value.strip()
        return self.root / Path(typed).expanduser() if typed else Path()

    @on(DirectoryTree.FileSelected)
    def _picked(self, event: DirectoryTree.FileSelected) -> None:
        event.stop()
        path = event.path
        shown = path.relative_to(self.root) if path.is_relative_to(self.root) else path
        self.query_one("#path", Input).value = str(shown)

    @on(TomlTree.Chosen)
    def _chosen(self, event: TomlTree.Chosen) -> None:
        self._submit(event.path, str(self.query_one("#pool", Select).value))

    @on(Input.Changed, "#path")
    def _changed(self) -> None:
        self._validate(self.path)

    @on(Input.Submitted, "#path")
    @on(Button.Pressed, "#submit")
    def _submit_pressed(self) -> None:
        self._submit(self.path, str(self.query_one("#pool", Select).value))

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    def _show(self, error: str = "", plan: str = "") -> None:
        self.query_one("#error", Static).update(fmt.one_line(error))
        self.query_one("#plan", Static).update(plan)

    def _relative(self, problem: str) -> str:
        """A problem about a file under the tree's root names it as the user typed it: a
        long absolute path would push the problem itself off the modal's line."""
        prefix = f"{self.root}{os.sep}"
        return problem.removeprefix(prefix)

    async def _load(self, path: Path) -> JobSpec | None:
        """The job, or None with the one-line problem shown inline (read off the UI thread).
        A submit's load and a validation run in different worker groups: a slow one that
        ends after a newer one started shows nothing (it would show a path no longer typed)."""
        self._loads += 1
        ticket = self._loads

        def show(error: str = "", plan: str = "") -> None:
            if ticket == self._loads:
                self._show(error, plan)

        if not path.name:
            show()
            return None
        try:
            job = await asyncio.to_thread(load_job, path)
        except JobFileError as exc:
            show(self._relative(str(exc)))
            return None
        show(plan=describe(job))
        if job.workspace is not None:
            plan = await asyncio.to_thread(
                plan_workspace, job.workspace.workdir, job.workspace.exclude, job.env.values()
            )
            show(plan=f"{describe(job)}\n{push_summary(plan)}")
        return job

    @work(exclusive=True, group="validate", exit_on_error=False, description="validate job")
    async def _validate(self, path: Path) -> None:
        await self._load(path)

    @work(exclusive=True, group="submit", exit_on_error=False, description="submit job")
    async def _submit(self, path: Path, pool: str) -> None:
        job = await self._load(path)
        if job is None:
            if not path.name:
                self._show("job file: choose a .toml file or type its path")
            return
        submitting = self.engine.submit(job, pool)
        try:
            run_id = await calls.call("submit", submitting, timeout=calls.SUBMIT_TIMEOUT_S)
        except calls.CallError as exc:
            self._show(str(exc))
            return
        self.dismiss(run_id)
