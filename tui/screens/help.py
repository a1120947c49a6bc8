"""`?`/f1: every key that applies where the user is, generated from the live bindings,
so the help can never disagree with what the keys do.

The screen's own keys come first (swjob's: the screen's, then the focused pane's,
then the console-wide ones), Textual's generic keys (cursor, page, focus, copy)
after them under their own heading. The list scrolls; it fits 80×24.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import ActiveBinding, Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Label, Static

from tui.widgets.footer import Footer

Row = tuple[str, str, bool]  # keys, description, enabled now


def _rank(active: ActiveBinding) -> int:
    """swjob's keys by where they act (this screen, the focused pane, everywhere), then
    the rest."""
    if not (active.binding.id or "").startswith("swjob."):
        return 3
    if isinstance(active.node, Screen):
        return 0
    return 2 if isinstance(active.node, App) else 1


def help_rows(bindings: dict[str, ActiveBinding], key_display: dict[str, str]) -> list[Row]:
    """One row per description, its keys each shown once ('? f1', not '? ?'), swjob's
    keys first."""
    keys: dict[str, list[str]] = {}
    enabled: dict[str, bool] = {}
    rank: dict[str, int] = {}
    for key, active in bindings.items():
        description = active.binding.description
        if not description or key.startswith("ctrl+c"):
            continue
        shown = keys.setdefault(description, [])
        display = key_display[key]
        shown.append(key if display in shown else display)
        enabled[description] = enabled.get(description, False) or active.enabled
        rank[description] = min(rank.get(description, 3), _rank(active))
    order = sorted(keys, key=lambda d: rank[d])  # stable: the bindings' own order within
    return [(" ".join(keys[d]), d, enabled[d]) for d in order if rank[d] < 3] + [
        (" ".join(keys[d]), d, enabled[d]) for d in order if rank[d] == 3
    ]


def help_table(bindings: dict[str, ActiveBinding], key_display: dict[str, str]) -> Table:
    table = Table(box=None, padding=(0, 2), show_header=False)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    generic = {d for d, active in _generic(bindings)}
    heading_done = False
    for keys, description, enabled in help_rows(bindings, key_display):
        if description in generic and not heading_done:
            table.add_row("", "")
            table.add_row("", Text("more keys", style="bold dim"))
            heading_done = True
        style = "" if enabled else "dim strike"
        table.add_row(keys, Text(description, style=style))
    return table


def _generic(bindings: dict[str, ActiveBinding]) -> list[tuple[str, ActiveBinding]]:
    """Descriptions that only Textual's own bindings carry."""
    ours = {a.binding.description for a in bindings.values() if _rank(a) < 3}
    return [
        (a.binding.description, a)
        for a in bindings.values()
        if _rank(a) == 3 and a.binding.description not in ours
    ]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss", "Close", id="swjob.help.dismiss"),
        Binding("question_mark", "dismiss", "Close", show=False, id="swjob.help.dismiss_question"),
        Binding("q", "dismiss", "Close", show=False, id="swjob.help.dismiss_q"),
        Binding("j", "scroll('down')", "Down", show=False, id="swjob.help.down"),
        Binding("k", "scroll('up')", "Up", show=False, id="swjob.help.up"),
    ]

    def __init__(self, table: Table) -> None:
        super().__init__()
        self.table = table

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            yield Label("Keys (greyed: not available now) · ctrl+p: every command", classes="title")
            with VerticalScroll():
                yield Static(self.table)
        yield Footer(alternatives=True)  # this dialog's keys, over the screen's below

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()  # arrows, page keys and j/k scroll the list

    def action_scroll(self, direction: str) -> None:
        scroll = self.query_one(VerticalScroll)
        scroll.scroll_down() if direction == "down" else scroll.scroll_up()
