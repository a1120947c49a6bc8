"""Speed benchmark of the smallest job (its figures stay out of CI).

1. End to end: `swjob run examples/hello/job.toml` as a subprocess, N times (default 10):
   median wall time and where it goes — the process's start-up (until its Submitted
   event), each phase from run.json durations_s, and its exit (after Finished).
2. Engine overhead per transition: the same job N times in-process; for every observed
   event, the time from its arrival at the run's driver (`RunDriver.post`) until its
   Transition event is published (`fsm.step` + publish + bookkeeping in `_advance`).
3. As the console runs it: submit → Finished in-process, N rounds, each with an engine
   whose fork server is warm (as `swjob-tui` keeps it on a local pool) and one whose
   node starts it (cold: its imports come before the fork), turn by turn; each submit
   comes a few seconds after its engine started, as a person's would (`--pause`, 3 s by
   default).

Goals: median wall under 0.6 s, overhead per transition under 10 ms. State, cache and
runs live in a temp dir removed afterwards; bytecode is written beside the sources even
under PYTHONDONTWRITEBYTECODE (an installed swjob has its bytecode; without it every
start compiled every module).

With `--python PY` (repeatable) the end-to-end runs use each of those interpreters'
swjob instead (another install: another version's operator and its agent), taking
turns round by round so the machine's load falls on all alike, for a before → after
from one run. A bare interpreter (`python -c pass`) takes its turn too, as the floor.

    python -m tests.bench.hello [-n 10] [--pause 3] [--python PY ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "examples" / "hello" / "job.toml"
STEP = "(fsm.step + publish only)"


def _env(root: Path) -> dict[str, str]:
    env = {**os.environ, "SWJOB_IROH_RELAY": "disabled", "SWJOB_IROH_BIND": "127.0.0.1:0"}
    for name in ("STATE", "CACHE", "CONFIG"):
        env[f"SWJOB_{name}_DIR"] = str(root / name.lower())
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: with bytecode (__pycache__/)
    return env


def _swjob_run(root: Path, runs_dir: Path, python: str) -> dict[str, float]:
    """One `swjob run`: its wall time split into start-up, phases and exit (seconds)."""
    started = time.time()
    done = subprocess.run(
        [python, "-m", "engine.cli", "run", str(JOB), "--runs-dir", str(runs_dir)],
        env=_env(root), cwd=root, capture_output=True, text=True, check=False,
    )  # fmt: skip
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"swjob run failed:\n{done.stdout}\n{done.stderr}")
    run_dir = max(runs_dir.glob("hello/*"), key=lambda p: p.stat().st_mtime)
    summary = json.loads((run_dir / "run.json").read_text())
    created = datetime.fromisoformat(summary["created"]).timestamp()
    finished = datetime.fromisoformat(summary["finished"]).timestamp()
    return {
        "wall": ended - started,
        "start-up": created - started,
        **summary["durations_s"],
        "exit": ended - finished,
    }


def end_to_end(root: Path, runs: int, pythons: list[str]) -> None:
    parts: dict[str, dict[str, list[float]]] = {py: defaultdict(list) for py in pythons}
    floor: list[float] = []
    for python in pythons:
        _swjob_run(root, root / "warm-up", python)  # writes the bytecode; not counted
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=_env(root), check=True)
        floor.append(time.perf_counter() - started)
        for python in pythons:
            for part, seconds in _swjob_run(root, root / "runs", python).items():
                parts[python][part].append(seconds)
    print(f"python -c pass: median {statistics.median(floor):.3f} s")
    for python, found in parts.items():
        walls = found.pop("wall")
        median = statistics.median(walls)
        print(f"swjob run with {python}, {runs} runs: median {median:.3f} s, "
              f"min {min(walls):.3f} s, max {max(walls):.3f} s  (goal < 0.6 s)")  # fmt: skip
        print("  where it goes (medians; start-up: until Submitted, exit: after Finished):")
        for part, values in found.items():
            share = statistics.median(values)
            print(f"    {part:<14} {share * 1000:7.1f} ms  {share / median:5.1%}")


async def _in_process(root: Path, runs: int) -> dict[str, list[float]]:
    from engine.engine import Engine, EngineConfig
    from engine.jobs.jobspec import load_job
    from engine.jobs.pools import load_pools
    from engine.run.orchestrator import RunDriver

    arrived: dict[int, float] = {}
    latency: dict[str, list[float]] = defaultdict(list)
    post, advance = RunDriver.post, RunDriver._advance

    def timed_post(self: RunDriver, event: object) -> None:
        arrived[id(event)] = time.perf_counter()
        post(self, event)

    def timed_advance(self: RunDriver, event: object) -> None:
        begun = time.perf_counter()
        advance(self, event)
        done = time.perf_counter()
        latency[type(event).__name__].append(done - arrived.pop(id(event)))
        latency[STEP].append(done - begun)

    RunDriver.post, RunDriver._advance = timed_post, timed_advance  # type: ignore[method-assign]
    try:
        config = EngineConfig(runs_dir=root / "runs-inproc", pools=load_pools(None))
        engine = Engine(config)
        await engine.start()
        try:
            for _ in range(runs):
                await engine.wait(await engine.submit(load_job(JOB), "local"))
        finally:
            await engine.close()
    finally:
        RunDriver.post, RunDriver._advance = post, advance  # type: ignore[method-assign]
    return latency


def overhead(root: Path, runs: int) -> None:
    latency = asyncio.run(_in_process(root, runs))
    every = [v for cause, values in latency.items() if cause != STEP for v in values]
    print(f"engine overhead per transition (event arrival → Transition published), "
          f"{len(every)} transitions: median {statistics.median(every) * 1000:.2f} ms, "
          f"max {max(every) * 1000:.2f} ms  (goal < 10 ms)")  # fmt: skip
    for cause, values in latency.items():
        print(f"    {cause:<22} median {statistics.median(values) * 1000:6.2f} ms  "
              f"max {max(values) * 1000:6.2f} ms")  # fmt: skip


SUBMIT_PAUSE_S = 3.0
"""Between an engine's start and its submit: a person opens the submit form, picks a job."""


async def _console_round(root: Path, warm: bool, pause: float) -> tuple[float, float]:
    """One hello run in a fresh engine: (submit → Finished, provisioning) in seconds."""
    from engine.engine import Engine, EngineConfig
    from engine.jobs.jobspec import load_job
    from engine.jobs.pools import load_pools
    from tests.support.processes import kill_own_fork_server

    if not warm:
        await asyncio.to_thread(kill_own_fork_server)
    runs_dir = root / "runs-console"
    config = EngineConfig(runs_dir=runs_dir, pools=load_pools(None), warm_agents=warm)
    engine = Engine(config)
    await engine.start()
    try:
        await asyncio.sleep(pause)
        started = time.perf_counter()
        view = await engine.wait(await engine.submit(load_job(JOB), "local"))
        took = time.perf_counter() - started
    finally:
        await engine.close()
    summary = json.loads((Path(view.run_dir) / "run.json").read_text())
    return took, summary["durations_s"]["provisioning"]


def console(root: Path, runs: int, pause: float) -> None:
    found: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for _ in range(runs):
        for warm in found:
            found[warm].append(asyncio.run(_console_round(root, warm, pause)))
    print(f"as the console runs it (in-process, {runs} rounds), submit → Finished:")
    for warm, rounds in found.items():
        walls, provisioning = zip(*rounds, strict=True)
        label = "fork server warm" if warm else "fork server cold"
        print(f"    {label:<24} median {statistics.median(walls) * 1000:6.0f} ms, "
              f"provisioning {statistics.median(provisioning) * 1000:5.0f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=10)
    parser.add_argument(
        "--pause",
        type=float,
        default=SUBMIT_PAUSE_S,
        help="seconds between an engine's start and its submit (0: the smoke run's)",
    )
    parser.add_argument(
        "--python", action="append", help="an interpreter whose swjob to run (repeatable)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="swjob-hello-") as tmp:
        end_to_end(Path(tmp), args.runs, args.python or [sys.executable])
        os.environ.update(_env(Path(tmp)))  # the in-process engines' state, as the runs'
        overhead(Path(tmp), args.runs)
        console(Path(tmp), args.runs, args.pause)
    print(f"reproduce: python -m tests.bench.hello {' '.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
