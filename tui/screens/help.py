"""`?`/f1: every key that applies where the user is, generated from the live bindings,
so the help can never disagree with what the keys do."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import ActiveBinding, Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static


def help_table(bindings: dict[str, ActiveBinding], key_display: dict[str, str]) -> Table:
    table = Table(box=None, padding=(0, 2), show_header=False)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    rows: dict[str, list[str]] = {}
    enabled: dict[str, bool] = {}
    for key, active in bindings.items():
        description = active.binding.description
        if not description or key.startswith("ctrl+c"):
            continue
        rows.setdefault(description, []).append(key_display[key])
        enabled[description] = enabled.get(description, False) or active.enabled
    for description, keys in rows.items():
        style = "" if enabled[description] else "dim strike"
        table.add_row(" ".join(keys), Text(description, style=style))
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="swjob.help.dismiss"),
        Binding("question_mark", "dismiss", "Close", show=False, id="swjob.help.dismiss_question"),
        Binding("q", "dismiss", "Close", show=False, id="swjob.help.dismiss_q"),
    ]

    def __init__(self, table: Table) -> None:
        super().__init__()
        self.table = table

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            yield Label("Keys (greyed: not available now) · ctrl+p: every command", classes="title")
            with VerticalScroll():
                yield Static(self.table)
