"""Progress snapshots for one transfer, throttled so a UI is fed, not flooded.

The engine turns each `Progress` into an `engine.report.events.TransferProgress`; at most
~10 per second reach it, plus one final `done=True` snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

MIN_INTERVAL_S = 0.1
_RATE_WINDOW_S = 3.0


@dataclass(frozen=True)
class Progress:
    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    current: str | None
    rate_bps: float
    eta_s: float | None
    done: bool


class ProgressMeter:
    """Counts bytes and files as they move and calls `on_progress` at most every 0.1 s.

    The rate is measured over the last few seconds (not since the start), so the ETA
    follows a link that speeds up or slows down, and does not count skipped bytes.
    """

    def __init__(
        self,
        on_progress: Callable[[Progress], None],
        bytes_total: int,
        files_total: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._emit = on_progress
        self._clock = clock
        self.bytes_total = bytes_total
        self.files_total = files_total
        self.bytes_done = 0
        self.files_done = 0
        self.current: str | None = None
        self._last_emit = float("-inf")
        self._samples: list[tuple[float, int]] = [(clock(), 0)]

    def restart(self, bytes_done: int, files_done: int) -> None:
        """Start an attempt from what the receiver already verified (resume).

        Bytes sent but not verified before a drop are not counted twice, and the
        rate restarts, so skipped bytes never inflate it.
        """
        self.bytes_done = bytes_done
        self.files_done = files_done
        self._samples = [(self._clock(), bytes_done)]

    def add(self, nbytes: int, files: int, current: str | None) -> None:
        self.bytes_done += nbytes
        self.files_done += files
        self.current = current
        now = self._clock()
        if now - self._last_emit >= MIN_INTERVAL_S:
            self._last_emit = now
            self._emit(self.snapshot(now, done=False))

    def finish(self) -> None:
        self.current = None
        self._emit(self.snapshot(self._clock(), done=True))

    def snapshot(self, now: float, *, done: bool) -> Progress:
        self._samples.append((now, self.bytes_done))
        while len(self._samples) > 2 and now - self._samples[1][0] > _RATE_WINDOW_S:
            self._samples.pop(0)
        t0, b0 = self._samples[0]
        rate = (self.bytes_done - b0) / (now - t0) if now > t0 else 0.0
        left = max(self.bytes_total - self.bytes_done, 0)
        eta = 0.0 if done else (left / rate if rate > 0 else None)
        return Progress(
            self.bytes_done,
            self.bytes_total,
            self.files_done,
            self.files_total,
            self.current,
            rate,
            eta,
            done,
        )
