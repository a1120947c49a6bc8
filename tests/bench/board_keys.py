"""Board key benchmark (not CI): the console's own cost of a held `j`/`k` on a board of
`--runs` recorded runs, with no engine work beside it (tests/bench/engine_load.py measures
the same keys with 100 live runs, where the engine's heartbeats share the loop).

The real app, headless at 160×50, on runs made from the recorded hello run
(tests/support/recorded.many_runs). Every 50 ms a cursor key (20 down, 20 up) and a probe key
are posted; the probe's latency is the time until its action runs behind them. Prints the
key latencies and the loop thread's CPU while the keys were pressed.

    python -m tests.bench.board_keys [--runs 100] [--keys 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from tests.support.keyprobe import press_keys, probe_app


async def bench(root: Path, runs: int, keys: int) -> tuple[list[float], float]:
    from engine.engine import Engine
    from tests.support.engines import engine_config
    from tests.support.recorded import RECORDED, many_runs, with_history

    engine = with_history(
        Engine(engine_config(root / "runs")), many_runs(RECORDED, root / "recorded", runs)
    )
    app = probe_app(engine)
    async with app.run_test(size=(160, 50)) as pilot:
        async with asyncio.timeout(60):
            await app.booted.wait()
        await pilot.pause(1.0)
        cpu = time.thread_time()
        latencies = await press_keys(app, keys)
        cpu = time.thread_time() - cpu
    return sorted(latencies), cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--keys", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="swjob-keys-") as tmp:
        for name in ("STATE", "CACHE", "CONFIG"):
            os.environ[f"SWJOB_{name}_DIR"] = str(Path(tmp) / name.lower())
        lat, cpu = asyncio.run(bench(Path(tmp), args.runs, args.keys))
    p95 = lat[max(0, int(len(lat) * 0.95) - 1)]
    print(
        f"{args.runs} recorded runs, {len(lat)} keys: latency p50 {statistics.median(lat):.1f} "
        f"ms, p95 {p95:.1f} ms, max {lat[-1]:.1f} ms; the loop's CPU {cpu:.2f} s "
        f"(load average {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
