"""The console with a probe key, for the benches that time keys (board_keys, engine_load).

A cursor key (20 down, 20 up) and then a probe key are posted every `KEYS_S`; the probe's
latency is the time until its action runs behind the cursor key and whatever else the
loop had to do: what a user holding `j` waits for.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.engine import Engine
    from tui.app import SwjobApp

KEYS_S = 0.05


def probe_app(engine: Engine) -> SwjobApp:
    """The real console, with one more (hidden) key whose action records its latency."""
    from textual.binding import Binding

    from tui.app import SwjobApp

    class ProbeApp(SwjobApp):
        BINDINGS = [Binding("ctrl+b", "ping", "bench ping", show=False)]
        sent = 0.0
        latencies: list[float] = []

        def action_ping(self) -> None:
            self.latencies.append((time.perf_counter() - self.sent) * 1000)

    return ProbeApp(engine)


async def press_keys(app: SwjobApp, keys: int) -> list[float]:
    """Press `keys` cursor keys, each followed by the probe; the probes' latencies (ms)."""
    from textual import events

    for n in range(keys):
        app.post_message(events.Key("j" if n % 40 < 20 else "k", None))
        app.sent = time.perf_counter()  # type: ignore[attr-defined]
        app.post_message(events.Key("ctrl+b", None))
        await asyncio.sleep(KEYS_S)
    return app.latencies  # type: ignore[attr-defined]
