"""What another process holding the run index's write lock costs an engine.

A real process holds runs.sqlite in `BEGIN EXCLUSIVE` (as a `sqlite3` shell left open
does) while an in-process engine, as the console runs it, runs N local jobs one after
another and then closes: per job, submit → end; the longest the loop went without a turn;
and how long closing took (its last bounded try at the index included). The same without
the lock, turn by turn, is the control. Goals: every run ends and the engine closes
within a few seconds, the loop never waits on the lock (stalls as in the control).
State, cache and runs live in a temp dir removed afterwards.

    python -m tests.bench.index_lock [-n 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path

COMMAND = "python -m tests.bench.index_lock"


async def _round(root: Path, jobs: int, held: bool) -> dict[str, float]:
    from engine.engine import Engine
    from engine.jobs.jobspec import load_job
    from engine.state.store import Store
    from tests.support.engines import engine_config
    from tests.support.sqlitelock import locked
    from tests.support.stalls import watched_loop

    os.environ["SWJOB_STATE_DIR"] = str(root / "state")
    Store().close()  # the index as a user has it: made by an earlier swjob
    (root / "job").mkdir(parents=True)
    (root / "job" / "job.toml").write_text('[job]\nname = "bench"\nrun = "true"\n')
    job = load_job(root / "job" / "job.toml")
    with locked(Store().path) if held else contextlib.nullcontext():
        engine = Engine(engine_config(root / "runs"))
        async with watched_loop() as stalls:
            await engine.start()
            took = []
            for _ in range(jobs):
                started = time.monotonic()
                await engine.wait(await engine.submit(job, "local"))
                took.append(time.monotonic() - started)
            closing = time.monotonic()
            await engine.close()
            closed = time.monotonic() - closing
    return {
        "median": statistics.median(took),
        "slowest": max(took),
        "stall": stalls.longest_s,
        "close": closed,
    }


async def main(jobs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("SWJOB_IROH_RELAY", "disabled")
        os.environ["SWJOB_CACHE_DIR"] = str(Path(tmp) / "cache")
        os.environ["SWJOB_CONFIG_DIR"] = str(Path(tmp) / "config")
        for name, held in (("control (index free)", False), ("index held", True)):
            got = await _round(Path(tmp) / name.split()[0], jobs, held)
            print(
                f"{name:22s} run median {got['median']:.2f} s, slowest {got['slowest']:.2f} s; "
                f"longest loop stall "
                f"{got['stall'] * 1000:.0f} ms, close {got['close']:.2f} s ({jobs} jobs)"
            )
    print(f"reproduce: {COMMAND} -n {jobs}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5, help="jobs per round")
    asyncio.run(main(parser.parse_args().n))
