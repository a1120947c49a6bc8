"""Which run the current asyncio task works for.

A provider is shared by every run of its pool and reports through one engine-wide
callback; without this, its retries and offer substitutions could not be told apart
from the engine's own warnings, and a run's record would lose them. The run driver
starts its work tasks in a context naming its run; the engine's alert sink reads it.
The same context carries where the run's boot steps go: a provider reports them as it
provisions and watches a node come up, without knowing which run it works for.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from engine.report.events import BootPhase

BootSink = Callable[[BootPhase, str | None], None]
"""Takes a boot step the current run's node reached, with a detail line (or None)."""

_RUN: ContextVar[str] = ContextVar("swjob_run", default="")
_BOOT: ContextVar[BootSink | None] = ContextVar("swjob_boot", default=None)


def current_run() -> str:
    """The run the calling task works for, or "" when it works for the engine as a whole."""
    return _RUN.get()


def work_for(run_id: str, boot: BootSink | None = None) -> None:
    """Mark the current context (call it inside a fresh copy) as working for `run_id`;
    `boot` takes the boot steps a provider reports while it works for that run."""
    _RUN.set(run_id)
    _BOOT.set(boot)


def boot_reached(phase: BootPhase, detail: str | None = None) -> None:
    """A provider's node reached a boot step (now). Outside a run's work (`swjob gc`, a
    provider test without a run) nobody is told."""
    sink = _BOOT.get()
    if sink is not None:
        sink(phase, detail)
