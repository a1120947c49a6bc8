"""Which run the current asyncio task works for.

A provider is shared by every run of its pool and reports through one engine-wide
callback; without this, its retries and offer substitutions could not be told apart
from the engine's own warnings, and a run's record would lose them. The run driver
starts its work tasks in a context naming its run; the engine's alert sink reads it.
"""

from __future__ import annotations

from contextvars import ContextVar

_RUN: ContextVar[str] = ContextVar("swjob_run", default="")


def current_run() -> str:
    """The run the calling task works for, or "" when it works for the engine as a whole."""
    return _RUN.get()


def work_for(run_id: str) -> None:
    """Mark the current context (call it inside a fresh copy) as working for `run_id`."""
    _RUN.set(run_id)
