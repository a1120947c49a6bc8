"""Log flood benchmark for swjob-tui (not CI): is the console responsive while a job
prints 200,000 lines as fast as it can?

A real job on the local pool floods stdout (and some stderr); the app runs headless
with the job's detail screen open (the live log pane is the worst case). Every 50 ms
a key press is posted, and the time until its binding's action runs is recorded.
Prints p50/p95/max key latency, peak RSS and how many lines the UI holds.

    python tests/bench/tui_flood.py [--lines 200000] [--cap 5000] [--history 500] [--board]

`--history N` first fills the run index with N past runs (copies of a real one), as a
user's index is after some weeks: the board reads its history ten times a second.
`--board` keeps the board in front instead of the job's detail.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

os.environ.setdefault("SWJOB_IROH_RELAY", "disabled")
os.environ.setdefault("SWJOB_IROH_BIND", "127.0.0.1:0")
_TMP = Path(tempfile.mkdtemp(prefix="swjob-flood-"))
for _name in ("STATE", "CACHE", "CONFIG"):
    os.environ[f"SWJOB_{_name}_DIR"] = str(_TMP / _name.lower())

from textual import events  # noqa: E402
from textual.binding import Binding  # noqa: E402

from engine.engine import Engine, EngineConfig  # noqa: E402
from engine.jobs.jobspec import load_job  # noqa: E402
from engine.jobs.pools import load_pools  # noqa: E402
from engine.state.store import Store  # noqa: E402
from tui.app import SwjobApp  # noqa: E402
from tui.widgets.log_view import LogView  # noqa: E402

FLOOD = """import sys
w = sys.stdout.write
for i in range(int(sys.argv[1])):
    w(f"flood line {i} lorem ipsum dolor sit amet, consectetur adipiscing elit\\n")
    if i % 1000 == 0:
        print(f"warning {i}", file=sys.stderr)
"""


class BenchApp(SwjobApp):
    """The real app plus one probe key whose action stamps when it ran."""

    BINDINGS = [Binding("ctrl+b", "ping", "bench ping", show=False)]

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sent = 0.0
        self.latencies: list[float] = []

    def action_ping(self) -> None:
        self.latencies.append(time.perf_counter() - self.sent)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def seed_history(engine: Engine, runs: int) -> None:
    """`runs` past runs in the index: copies of one real run under new ids and dates."""
    job_file = _TMP / "past" / "job.toml"
    job_file.parent.mkdir()
    job_file.write_text('[job]\nname = "past"\nrun = "echo done"\n')
    view = await engine.wait(await engine.submit(load_job(job_file), "local"))
    store = Store()
    for n in range(runs):
        run_id = f"{view.run_id[:-6]}{n:06d}"
        created = view.created - timedelta(hours=n + 1)
        store.save(view.model_copy(update={"run_id": run_id, "created": created}))
    store.close()


async def bench(lines: int, cap: int, history: int, board: bool) -> None:
    job_file = _TMP / "flood" / "job.toml"
    job_file.parent.mkdir()
    (job_file.parent / "flood.py").write_text(FLOOD)
    job_file.write_text(
        f'[job]\nname = "flood"\nrun = "python3 flood.py {lines}"\n'
        'workspace = { workdir = "." }\n'
    )
    engine = Engine(EngineConfig(runs_dir=_TMP / "runs", pools=load_pools(None)))
    app = BenchApp(engine, log_cap=cap)
    async with app.run_test(size=(130, 40)) as pilot:
        await asyncio.wait_for(app.booted.wait(), 30)
        if history:
            await seed_history(engine, history)
        rss_before = rss_mib()
        started = time.perf_counter()
        run_id = await engine.submit(load_job(job_file), "local")
        if not board:
            app.open_run(run_id)
        waiter = asyncio.ensure_future(engine.wait(run_id))
        while not waiter.done():
            app.sent = time.perf_counter()
            app.post_message(events.Key("ctrl+b", None))
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        await pilot.pause(0.2)
        report(app, run_id, elapsed, rss_before)


def report(app: BenchApp, run_id: str, elapsed: float, rss_before: float) -> None:
    lat = sorted(x * 1000 for x in app.latencies)
    p95 = lat[int(len(lat) * 0.95) - 1]
    run = app.engine.run(run_id)
    assert run is not None
    on_disk = app.engine.log_path(run_id, "run").read_text().count("\n")
    ring = app.feed.log(run_id)
    views = app.screen.query(LogView)
    shown = views.first().line_count if views else 0
    print(f"command : python {' '.join(sys.argv)}")
    print(f"flood   : {ring.total} lines received, submit to finish {elapsed:.1f} s, ", end="")
    print(f"{on_disk} lines in logs/run.log, run {run.state}")
    print(f"keys    : {len(lat)} presses, latency p50 {statistics.median(lat):.1f} ms, ", end="")
    print(f"p95 {p95:.1f} ms, max {lat[-1]:.1f} ms")
    print(
        f"memory  : peak RSS {rss_mib():.0f} MiB (before the flood {rss_before:.0f} MiB); ", end=""
    )
    print(f"log view holds {shown} lines, ring {len(ring.lines)} (cap {ring.cap})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--cap", type=int, default=5000)
    parser.add_argument("--history", type=int, default=0, help="past runs in the index")
    parser.add_argument("--board", action="store_true", help="the board in front, not the detail")
    args = parser.parse_args()
    try:
        asyncio.run(bench(args.lines, args.cap, args.history, args.board))
    finally:
        shutil.rmtree(_TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
