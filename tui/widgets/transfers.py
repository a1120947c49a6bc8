"""Progress of the run's transfers: workspace push and output pull, one bar each.

Figures come from the engine's transfer events (its own rate and ETA), so the bars
show what the transfer measured, not a guess from the UI's redraw rhythm.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, ProgressBar

from engine.api import TransferProgress
from tui import format as fmt

TITLES = {"push": "workspace push", "pull": "output pull"}


def describe(tp: TransferProgress) -> str:
    eta = "done" if tp.done else f"ETA {fmt.duration(tp.eta_s)}"
    figures = (
        f"{fmt.size(tp.bytes_done)} / {fmt.size(tp.bytes_total)} · "
        f"{tp.files_done}/{tp.files_total} files · {fmt.rate(tp.rate_bps)} · {eta}"
    )
    return figures if tp.done or not tp.current else f"{figures} · {tp.current}"


class TransferBar(Horizontal):
    """One transfer's bar. It is in the screen as soon as it is mounted, but its bar and
    figures only once its Mount comes: progress shown before then is kept and drawn then
    (asked of the missing bar, it raised NoMatches and took the console down)."""

    def __init__(self, direction: str) -> None:
        super().__init__(id=f"transfer-{direction}", classes="transfer")
        self.direction = direction
        self._latest: TransferProgress | None = None
        self._ready = False  # its bar and figures are there (is_mounted comes later still)

    def compose(self) -> ComposeResult:
        yield Label(TITLES[self.direction], classes="transfer-title")
        yield ProgressBar(total=None, show_eta=False)
        yield Label("", classes="transfer-figures")

    def on_mount(self) -> None:
        self._ready = True
        if self._latest is not None:
            self._draw(self._latest)

    def show(self, tp: TransferProgress) -> None:
        self._latest = tp
        if self._ready:
            self._draw(tp)

    def _draw(self, tp: TransferProgress) -> None:
        self.query_one(ProgressBar).update(total=max(tp.bytes_total, 1), progress=tp.bytes_done)
        self.query_one(".transfer-figures", Label).update(describe(tp))


def moved_nothing(tp: TransferProgress) -> bool:
    """A finished transfer of no files (a job without outputs): no bar for it — "0% …
    done" would read as a failure."""
    return tp.done and tp.files_total == 0 and tp.bytes_total == 0


class Transfers(Vertical):
    """Bars appear as transfers start; a run without a workspace never shows a push bar,
    nor one without outputs a pull bar."""

    def show(self, transfers: dict[str, TransferProgress]) -> None:
        shown = {d: tp for d, tp in transfers.items() if not moved_nothing(tp)}
        for direction in ("push", "pull"):
            tp = shown.get(direction)
            if tp is None:
                continue
            bars = self.query(f"#transfer-{direction}")
            if not bars:
                bar = TransferBar(direction)
                bar.show(tp)  # drawn when it is mounted
                self.mount(bar)
            else:
                bars.first(TransferBar).show(tp)
        self.display = bool(shown)
