"""Who drives an unfinished run the board lists but this console does not.

A run is driven by the one live process holding its lease (engine/state/ownership.py).
An unfinished run this console does not drive is either followed from its files
because another process drives it (`swjob run` in another terminal), or driven by
nobody: its owner died. The console adopts such runs by itself every few seconds;
`a` adopts the selected one now (and says why when it cannot).
"""

from __future__ import annotations

from enum import Enum

from engine.api import RunView, has_live_owner


class Owner(Enum):
    ELSEWHERE = "elsewhere"
    NOBODY = "no owner"

    def describe(self) -> str:
        if self is Owner.ELSEWHERE:
            return "driven by another swjob process: followed read-only here"
        return "no process drives this run (its owner is gone): a adopts it"


def owner(run: RunView) -> Owner | None:
    """None for a run this console drives, or one that is over."""
    if run.live or run.terminal:
        return None
    return Owner.ELSEWHERE if has_live_owner(run.run_id) else Owner.NOBODY
