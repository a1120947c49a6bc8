"""Collect orphans: the nodes that bill without a live run, listed, destroyed on `y`.

Listing asks the provider's accounts, so it runs in a worker while the modal says
so; destroying is the app's job (a worker that outlives this modal), so the modal
only answers with the orphans listed when the operator agreed. Collecting destroys only
ours (`Orphan.collectable`): another operator's instance, or one already being
destroyed, is left. So the key counts only those it destroys, says how many it leaves,
and when none is ours it is disabled and says why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from tui import calls
from tui.widgets.footer import Footer

if TYPE_CHECKING:
    from engine.api import Orphan

Finder = Callable[[], Awaitable[list["Orphan"]]]


def describe(orphans: list[Orphan]) -> Text:
    """One line per node, then what they cost together per hour."""
    if not orphans:
        return Text("no orphaned nodes", style="green")
    text = Text("\n".join(f"• {o.describe()}" for o in orphans))
    per_hour = sum(o.price_per_hour or 0.0 for o in orphans)
    if per_hour:
        text.append(f"\n\ntogether ${per_hour:.3f}/h while they live", style="bold yellow")
    return text


def outcome(found: list[Orphan]) -> str:
    """What collecting does with what was found: what `y` destroys and what it leaves
    (its keys are the footer's)."""
    ours = [o for o in found if o.collectable]
    left = _counted([o.why_left or "" for o in found if not o.collectable])
    if ours:
        leaves = f", leaves {left}" if left else ""
        return f"collecting destroys {len(ours)}{leaves}"
    if found:
        return f"nothing here is ours to collect: {left}"
    return ""


def _counted(reasons: list[str]) -> str:
    """One part per reason, with how many: `1 operator 0badc0de's, not ours`."""
    return "; ".join(f"{n} {reason}" for reason, n in Counter(reasons).items())


class OrphansScreen(ModalScreen["list[Orphan] | None"]):
    """`y`/enter destroys the listed nodes that are ours, `n`/esc cancels; nothing is
    destroyed unasked, and `y` is disabled while nothing listed is ours to destroy."""

    BINDINGS = [
        Binding("y", "answer(True)", "Destroy them", id="swjob.orphans.answer_true"),
        Binding(
            "enter", "answer(True)", "Destroy them", show=False, id="swjob.orphans.answer_enter"
        ),
        Binding("n", "answer(False)", "Cancel", id="swjob.orphans.answer_false"),
        # with nothing listed, y and enter close the dialog (not offered as such)
        Binding("y,enter", "close", "Close", show=False, id="swjob.orphans.close"),
        Binding("escape", "answer(False)", "Cancel", show=False, id="swjob.orphans.answer_escape"),
    ]

    def __init__(self, find: Finder) -> None:
        super().__init__()
        self.find = find
        self.found: list[Orphan] | None = None  # None while the accounts are being listed

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog orphans"):
            yield Label("Orphaned nodes: billing without a live run", classes="title")
            with VerticalScroll():
                yield Static("listing provider accounts and the instance ledger…", id="found")
            yield Label("", id="outcome", classes="outcome").set_styles("display: none;")
        yield Footer(alternatives=True)  # this dialog's keys, over the screen's below

    def on_mount(self) -> None:
        self._list()

    @work(exclusive=True, group="orphans", exit_on_error=False, description="list orphans")
    async def _list(self) -> None:
        try:
            found = await calls.call(
                "list orphaned nodes", self.find(), timeout=calls.LIST_TIMEOUT_S
            )
        except calls.CallError as exc:
            self.query_one("#found", Static).update(Text(str(exc), style="red"))
            return
        self.show(found)

    def show(self, found: list[Orphan]) -> None:
        self.found = found
        self.query_one("#found", Static).update(describe(found))
        said, text = self.query_one("#outcome", Label), outcome(found)
        said.update(text)
        said.display = bool(text)
        self.refresh_bindings()

    def _ours(self) -> bool:
        return any(o.collectable for o in self.found or [])

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """`y`/enter is offered only once something listed is ours to destroy: while the
        accounts are listed, and when nothing was found, the dialog offered to destroy
        nothing. What is listed but none of ours shows it disabled (the outcome line
        says why)."""
        if action == "answer" and parameters == (True,) and not self._ours():
            return None if self.found else False
        if action == "close":
            return not self.found  # listed, none of ours: y stays disabled, said why
        return True

    def action_close(self) -> None:
        self.dismiss(None)

    def action_answer(self, destroy: bool) -> None:
        self.dismiss(self.found if destroy and self._ours() else None)
