"""The questions the console asks: stop this job? quit with jobs running? quit with warm
nodes kept?"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label

from engine.api import RunView, WarmNodeView
from tui.format import duration
from tui.widgets.footer import Footer


def stop_consequence(run: RunView) -> str:
    """What a stop will do, in the run's own terms: a run still waiting for a node has no
    node to speak of."""
    ends = "the run ends FAILED, “stopped by operator”."
    if run.node is None:
        return (
            f"It is {run.state} and no node has joined for it yet (it may be queued for a "
            f"free node). It leaves the queue, any node being started for it is torn down; {ends}"
        )
    return f"It is {run.state} ({run.phase}). The job is stopped and its node torn down; {ends}"


class ConfirmStopScreen(ModalScreen[bool]):
    """`y`/enter stops, `n`/esc cancels: a stop tears the node down, so it is never one key."""

    BINDINGS = [
        Binding("y", "answer(True)", "Stop it", id="swjob.modals.answer_true"),
        Binding(
            "enter", "answer(True)", "Stop it", show=False, id="swjob.modals.answer_true_enter"
        ),
        Binding("n", "answer(False)", "Cancel", id="swjob.modals.answer_false"),
        Binding(
            "escape", "answer(False)", "Cancel", show=False, id="swjob.modals.answer_false_escape"
        ),
    ]

    def __init__(self, run: RunView) -> None:
        super().__init__()
        self.run = run

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Stop {self.run.job_name} ({self.run.run_id})?", classes="title")
            yield Label(stop_consequence(self.run))
        yield Footer(alternatives=True)  # this dialog's keys, over the screen's below

    def action_answer(self, stop: bool) -> None:
        self.dismiss(stop)


class QuitScreen(ModalScreen[str | None]):
    """Leaving with runs alive is a money decision, so it is asked, with both options."""

    BINDINGS = [
        Binding("s", "answer('stop')", "Stop all and tear down", id="swjob.modals.answer_stop"),
        Binding("l", "answer('leave')", "Leave running", id="swjob.modals.answer_leave"),
        Binding("escape", "answer(None)", "Cancel", id="swjob.modals.answer_none"),
        Binding("c", "answer(None)", "Cancel", show=False, id="swjob.modals.answer_none_c"),
    ]

    def __init__(self, running: list[RunView]) -> None:
        super().__init__()
        self.running = running

    def compose(self) -> ComposeResult:
        names = ", ".join(f"{r.job_name} ({r.run_id})" for r in self.running)
        with Vertical(classes="dialog"):
            yield Label(f"{len(self.running)} job(s) still running", classes="title")
            yield Label(names)
            yield Label(
                "If you leave them running, their nodes keep running — and billing — "
                "after the console exits."
            )
            with Horizontal(classes="buttons"):
                yield Button("Stop all and tear down", id="stop", variant="error")
                yield Button("Leave running", id="leave", variant="warning")
                yield Button("Cancel", id="cancel")
        yield Footer(alternatives=True)  # this dialog's keys, over the screen's below

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)

    def action_answer(self, choice: str | None) -> None:
        self.dismiss(choice)


class WarmQuitScreen(ModalScreen[str | None]):
    """Quitting with warm nodes kept: keep them (the default — each releases itself when
    its pool's keep_warm_s passes, console or no console) or release them now."""

    BINDINGS = [
        Binding("k", "answer('keep')", "Keep them", id="swjob.modals.warm_keep"),
        Binding("r", "answer('release')", "Release now", id="swjob.modals.warm_release"),
        Binding("escape", "answer(None)", "Cancel", id="swjob.modals.warm_none"),
    ]

    def __init__(self, kept: list[WarmNodeView]) -> None:
        super().__init__()
        self.kept = kept

    def compose(self) -> ComposeResult:
        names = ", ".join(f"{n.node_id} ({n.pool})" for n in self.kept)
        longest = max(n.expires_in_s for n in self.kept)
        with Vertical(classes="dialog"):
            yield Label(f"{len(self.kept)} warm node(s) kept for your next run", classes="title")
            yield Label(names)
            yield Label(
                "Keeping them is safe: each releases itself when its pool's keep_warm_s "
                f"passes (the last in {duration(longest)}), with or without the console. "
                "Until then they bill."
            )
            with Horizontal(classes="buttons"):
                yield Button("Keep them", id="keep", variant="primary")
                yield Button("Release now", id="release", variant="warning")
                yield Button("Cancel", id="cancel")
        yield Footer(alternatives=True)

    def on_mount(self) -> None:
        self.query_one("#keep", Button).focus()  # the default: enter keeps them

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)

    def action_answer(self, choice: str | None) -> None:
        self.dismiss(choice)
