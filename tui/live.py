"""The console's live-node actions: `!` opens a shell on the run's node, `p` forwards a port.

The shell is `swjob shell RUN` run as a child while the console is suspended: the child
reaches this very process's engine through its local access point, so the engine
(on this event loop) must keep running while the child owns the terminal. The console
therefore awaits the child instead of blocking, and holds a batch update meanwhile so
nothing it redraws reaches the terminal the shell is using.
"""

from __future__ import annotations

import asyncio
import sys

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from engine.api import Forward, RunView
from tui.widgets.footer import Footer

SHELL_COMMAND = (sys.executable, "-m", "engine.cli", "shell")


async def run_shell(app: App[object], run_id: str) -> int:
    """`swjob shell RUN` in the terminal, the console suspended; its exit status.
    Raises textual's SuspendNotSupported where the console cannot step aside."""
    with app.batch_update(), app.suspend():
        # the terminal is the shell's now, blank until the node answers (seconds): say so
        if sys.__stdout__ is not None:
            sys.__stdout__.write(f"swjob: connecting to the node of {run_id}… (exit returns)\n")
            sys.__stdout__.flush()
        proc = await asyncio.create_subprocess_exec(*SHELL_COMMAND, run_id)
        return await proc.wait()


def parse_ports(text: str) -> tuple[int, int] | str:
    """`REMOTE [LOCAL]` as two ports (LOCAL 0: any free one), or what is wrong with it."""
    parts = text.replace(":", " ").split()
    if not 1 <= len(parts) <= 2 or not all(p.isdigit() for p in parts):
        return "type the node's port, optionally followed by a local port"
    remote, local = int(parts[0]), int(parts[1]) if len(parts) == 2 else 0
    if not 1 <= remote <= 65535 or not 0 <= local <= 65535:
        return "ports are 1-65535"
    return remote, local


class ForwardScreen(ModalScreen[tuple[int, int] | None]):
    """Asks which node port to forward (and, optionally, to which local port)."""

    BINDINGS = [
        # before the port field's own enter (not shown), so that the footer names it
        Binding("enter", "forward", "Forward", priority=True, id="swjob.forward.forward"),
        Binding("escape", "cancel", "Cancel", id="swjob.forward.cancel"),
    ]

    def __init__(self, run: RunView) -> None:
        super().__init__()
        self.run = run

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Forward a port of {self.run.job_name}'s node", classes="title")
            yield Label("node port, then optionally a local port (e.g. 6006 or 8888 9000)")
            yield Input(placeholder="6006", id="ports")
            yield Label("", id="problem")
        yield Footer(alternatives=True)  # this dialog's keys, over the screen's below

    def action_forward(self) -> None:
        parsed = parse_ports(self.query_one("#ports", Input).value)
        if isinstance(parsed, str):
            self.query_one("#problem", Label).update(parsed)
            return
        self.dismiss(parsed)

    def action_cancel(self) -> None:
        self.dismiss(None)


def forwards_text(forwards: list[Forward]) -> str:
    """One line per forward for the detail: where to point a browser, and what it does."""
    return "\n".join(
        f"⇄ {f.describe()}  ({f.active} open, {f.served} served)"
        + (f"  last error: {f.errors[-1]}" if f.errors else "")
        for f in forwards
    )
