"""The log view with its search bar: `/` opens the bar, enter searches, esc closes it."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input

from tui.messages import SearchRequested
from tui.widgets.log_view import LogView


class SearchBar(Input):
    BINDINGS = [Binding("escape", "close", "Close search", show=False, id="swjob.log_pane.close")]

    def action_close(self) -> None:
        self.display = False
        self.parent.query_one(LogView).focus()  # type: ignore[union-attr]


class LogPane(Vertical):
    ALLOW_MAXIMIZE = True

    def __init__(self, cap: int = 5000, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.cap = cap

    def compose(self) -> ComposeResult:
        yield LogView(self.cap, id="log")
        bar = SearchBar(placeholder="search the log (enter: find, n/N: next/previous)")
        bar.display = False
        yield bar

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    @on(SearchRequested)
    def open_search(self) -> None:
        bar = self.query_one(SearchBar)
        bar.display = True
        bar.focus()

    @on(Input.Submitted)
    def run_search(self, event: Input.Submitted) -> None:
        event.stop()
        self.query_one(SearchBar).display = False
        self.view.focus()
        self.view.search(event.value)
