"""A provider's word that a node is gone, believed only when it holds.

Vast.ai's listings are eventually consistent: one lookup of a healthy instance may answer
404, `{"instances": []}` or null, or list it "exited" for a moment (a container being
restarted). Ending a run on one such answer killed healthy runs and lost their outputs.
So a verdict of "gone" stands only once the provider said so on `CONFIRMATIONS`
lookups in a row spanning at least the grace period (the pool's `node_lost_after_s`, the
same patience the run gives a silent agent); any lookup that lists the node alive
starts over. Even then the agent's heartbeat has the last word (engine/run/orchestrator.py).
"""

from __future__ import annotations

import time

CONFIRMATIONS = 2


class Hearsay:
    """Successive verdicts about one node → the verdict once it has held."""

    def __init__(self, grace_s: float) -> None:
        self._grace_s = grace_s
        self._first: float | None = None
        self._count = 0

    @property
    def suspected(self) -> bool:
        """A verdict is waiting to be confirmed (look again soon)."""
        return self._first is not None

    def heard(self, verdict: str | None, now: float | None = None) -> str | None:
        """`verdict` (None: the node was listed alive) → the verdict once confirmed."""
        now = time.monotonic() if now is None else now
        if verdict is None:
            self._first, self._count = None, 0
            return None
        if self._first is None:
            self._first = now
        self._count += 1
        if self._count >= CONFIRMATIONS and now - self._first >= self._grace_s:
            return verdict
        return None
