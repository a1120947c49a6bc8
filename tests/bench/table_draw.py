"""The runs' table's drawing CPU while runs arrive (not CI): the largest part of the
console's frames while 12 runs start at once (tests/bench/teardown_stall.py), measured
alone, where the machine's load does not blur it.

The board's table (headless, 130×30) gets `--runs` runs one by one, each on top, and at
each arrival the three newest change state; every frame's drawing of the table is timed
(thread CPU). Prints the median over `--reps` rounds of all frames' CPU and of the
costliest frame. With `--before DIR` (a checkout of another commit) the same rounds run
there too, in a sibling process each, taking turns.

    python -m tests.bench.table_draw [--runs 12] [--reps 5] [--before DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

NOW = datetime(2026, 12, 6, 22, 0, tzinfo=UTC)


async def one_round(runs: int) -> tuple[float, float]:
    """All frames' CPU and the costliest frame's, in seconds, over one round."""
    from textual.app import App, ComposeResult
    from textual.geometry import Region
    from textual.strip import Strip

    from engine.report.views import RunView
    from tui.widgets.jobs_table import JobsTable

    frames: list[float] = []

    class Timed(JobsTable):
        def render_lines(self, crop: Region) -> list[Strip]:
            began = time.thread_time()
            try:
                return super().render_lines(crop)
            finally:
                frames.append(time.thread_time() - began)

    class Board(App[None]):
        def compose(self) -> ComposeResult:
            yield Timed(lambda: NOW, id="jobs")

    def run(i: int, state: str = "PENDING", phase: str = "provision") -> RunView:
        return RunView(
            run_id=f"20261206-2200{i:02d}-0000abcd", job_name=f"job{i}", pool="local",
            state=state, phase=phase, created=NOW - timedelta(seconds=100 - i),
            updated=NOW, run_dir=Path("/tmp"),
        )  # fmt: skip

    app = Board()
    async with app.run_test(size=(130, 30)) as pilot:
        table = app.query_one(Timed)
        views: list[RunView] = []
        for i in range(runs):
            views.append(run(i))
            table.upsert(list(views))
            await pilot.pause()
            for back, phase in list(enumerate(("boot", "run", "done")))[: len(views)]:
                views[-1 - back] = run(len(views) - 1 - back, "RUNNING", phase)
            table.upsert(list(views))
            await pilot.pause()
    return sum(frames), max(frames)


def rounds_in(tree: Path | None, runs: int, reps: int) -> list[tuple[float, float]]:
    """`reps` rounds here (`tree` None) or in a sibling process run from `tree`."""
    if tree is None:
        return [asyncio.run(one_round(runs)) for _ in range(reps)]
    # this file, run there: it imports that tree's console (the tree may not have it)
    command = [sys.executable, __file__, "--runs", str(runs)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [*command, "--reps", str(reps), "--json"], cwd=tree, env=env, check=True,
        capture_output=True, text=True,
    ).stdout  # fmt: skip
    return [tuple(pair) for pair in json.loads(out)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12, help="runs arriving one by one")
    parser.add_argument("--reps", type=int, default=5, help="rounds (each side)")
    parser.add_argument("--before", type=Path, help="a checkout to compare with, in turns")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.json:
        print(json.dumps(rounds_in(None, args.runs, args.reps)))
        return
    sides: dict[str, list[tuple[float, float]]] = {"this tree": []}
    if args.before:
        sides["before"] = []
    for _ in range(args.reps):  # one round a side at a time: the same load on both
        sides["this tree"] += rounds_in(None, args.runs, 1)
        if args.before:
            sides["before"] += rounds_in(args.before.resolve(), args.runs, 1)
    print(f"command: python -m tests.bench.table_draw --runs {args.runs} --reps {args.reps}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    for side, rounds in sides.items():
        total = statistics.median(t for t, _ in rounds) * 1000
        worst = statistics.median(w for _, w in rounds) * 1000
        print(f"{side:9}: all frames {total:.1f} ms, costliest frame {worst:.1f} ms (medians)")


if __name__ == "__main__":
    main()
