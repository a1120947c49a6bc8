"""How many control connections may wait for admission at once.

Before a peer has shown a run's join token it is a stranger, and a stranger must not be
able to make the engine hold memory or tasks for it: each waiting connection costs a
handler, a QUIC stream and a frame buffer. So at most `per_peer` connections from one
endpoint id, and `total` from everyone, may be between "connected" and "admitted or
refused"; beyond that a new connection is closed at once. Admitted nodes do not count.
"""

from __future__ import annotations

from collections import Counter

MAX_UNADMITTED = 32
MAX_UNADMITTED_PER_PEER = 4


class PeerGate:
    def __init__(self, total: int = MAX_UNADMITTED, per_peer: int = MAX_UNADMITTED_PER_PEER):
        self.total = total
        self.per_peer = per_peer
        self._waiting: Counter[str] = Counter()

    def enter(self, peer: str) -> str | None:
        """Count one more connection from `peer`; None when it may wait, else why not."""
        if self._waiting[peer] >= self.per_peer:
            return f"{self.per_peer} connections of this peer already await admission"
        if self._waiting.total() >= self.total:
            return f"{self.total} connections already await admission"
        self._waiting[peer] += 1
        return None

    def leave(self, peer: str) -> None:
        self._waiting[peer] -= 1
        if self._waiting[peer] <= 0:
            del self._waiting[peer]

    @property
    def waiting(self) -> int:
        return self._waiting.total()
