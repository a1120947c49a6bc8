"""The board's warning banner: what may still be billing, until someone acts on it.

Two sources: runs whose teardown finally failed (their persistent alerts, with the
instance id in the message) and the engine's orphan warnings (nodes billing with no
live run). A toast fades; this stays on the board as long as the trouble does.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from engine.api import RunView
from tui.feed import OrphanLine


def render_banner(runs: list[RunView], orphans: list[OrphanLine]) -> Text:
    text = Text()
    for run in runs:
        for alert in run.alerts:
            text.append("⚠ ", style="bold red").append(alert, style="bold red")
            text.append(f"  ({run.job_name} · {run.run_id})\n", style="red")
    for orphan in orphans:  # one `x` leaves alone already says why
        text.append("⚠ orphaned node: ", style="bold yellow").append(orphan.text)
        text.append("  — x to collect\n" if orphan.collectable else "\n", style="bold")
    text.rstrip()
    return text


class Banner(Static):
    """Hidden while there is nothing to warn about; redrawn only when the warnings change."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._shown: tuple[object, ...] = ()
        self.display = False

    def show(self, runs: list[RunView], orphans: list[OrphanLine]) -> None:
        flagged = [run for run in runs if run.alerts]
        key = (tuple((r.run_id, tuple(r.alerts)) for r in flagged), tuple(orphans))
        if key == self._shown:
            return
        self._shown = key
        self.update(render_banner(flagged, orphans))
        self.display = bool(flagged or orphans)
