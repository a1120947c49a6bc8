"""Messages the console's parts send each other: small dataclasses, in one place."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass
class RunsUpdated(Message):
    """Tick: runs may have changed. The screen takes the changed ids from the feed when it
    handles this, so a newer tick can replace a queued one without losing anything."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunsUpdated)


@dataclass
class RunFinished(Message):
    """A run reached COMPLETED or FAILED while we watched: the app raises a toast."""

    run_id: str
    job_name: str
    state: str
    reason: str | None


@dataclass
class OpenRun(Message):
    """Open the job detail of this run (enter on the board, `l`, or the command palette)."""

    run_id: str
    logs: bool = False  # focus the log pane, maximized


@dataclass
class SearchRequested(Message):
    """The log view asks its pane to show the search bar."""
