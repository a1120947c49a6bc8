"""A transfer bar shown again before it has finished mounting: its bar and figures are
not there yet. Asked for them, it raised NoMatches out of the detail screen's update,
which took the console down (seen on a loaded machine: a pull's second progress event
came within the bar's mount)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Label

from engine.api import TransferProgress
from tui.widgets.transfers import Transfers


class _OneTransfers(App[None]):
    def compose(self) -> ComposeResult:
        yield Transfers()


def _pull(done: int) -> TransferProgress:
    return TransferProgress(
        run_id="r", direction="pull", bytes_done=done, bytes_total=100, files_done=0,
        files_total=1,
    )  # fmt: skip


async def test_progress_shown_while_the_bar_mounts_is_drawn_once_it_has() -> None:
    app = _OneTransfers()
    async with app.run_test() as pilot:
        transfers = app.query_one(Transfers)
        transfers.show({"pull": _pull(10)})  # mounts the bar
        transfers.show({"pull": _pull(60)})  # the same turn: the bar has no children yet
        await pilot.pause()
        figures = app.query_one(".transfer-figures", Label)
        assert str(figures.render()).startswith("60 B / 100 B")
