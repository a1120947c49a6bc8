"""Warm-node benchmark: the same hello job on a new node and on a kept one, in one run.

For each pool — a Vast.ai pool on the project's stand-in (real `vastai` SDK; each new
instance takes `--boot-delay` seconds to "pull its image", then its on-start command
really installs and starts the agent) and the local pool — N rounds of: the hello job on
a fresh node (`cold=True`, as `swjob run --cold`), then on the warm node the previous run
left (the pool has `keep_warm_s`). Each run is timed in-process from `submit` to its first
log line and to its Finished event. Goals (issue 32): warm, submit → first line ≤ 1.0 s
and submit → COMPLETED ≤ 1.5 s. Then the delta push: a `--tree-mb` tree (1 MiB files of
random bytes) pushed to a new local node, one file changed, pushed again to the same node
kept warm — bytes sent and seconds of each push, from run.json (goal: < 1 MB, < 0.5 s).
State, cache and runs live in a temp dir removed afterwards; every kept node is released.

    python -m tests.bench.warm [-n 3] [--boot-delay 5] [--tree-mb 277]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from engine.report.events import Finished, Log

if TYPE_CHECKING:
    from engine.api import Engine, JobSpec

REPO = Path(__file__).resolve().parents[2]
GOALS = {"first line": 1.0, "completed": 1.5}


def _isolate(root: Path) -> None:
    """This process's swjob state in `root`; iroh on loopback only."""
    os.environ.update(SWJOB_IROH_RELAY="disabled", SWJOB_IROH_BIND="127.0.0.1:0")
    for name in ("STATE", "CACHE", "CONFIG"):
        os.environ[f"SWJOB_{name}_DIR"] = str(root / name.lower())


async def _timed(engine: Engine, job: JobSpec, pool: str, cold: bool) -> dict[str, float]:
    """One run: seconds from submit to its first log line and to its end."""
    sub = engine.subscribe()
    started = time.perf_counter()
    run_id = await engine.submit(job, pool, cold=cold)
    first = None
    async for event in sub:
        if event.run_id == run_id and isinstance(event, Log) and first is None:
            first = time.perf_counter() - started
        if event.run_id == run_id and isinstance(event, Finished):
            break
    ended = time.perf_counter() - started
    sub.close()
    if event.state != "COMPLETED":
        raise SystemExit(f"{pool} run {run_id} ended {event.state}: {event.reason}")
    return {"first line": first or ended, "completed": ended}


async def _measure(
    root: Path, rounds: int, boot_delay: float, tree_mb: int
) -> dict[str, dict[str, list]]:
    from engine.api import Engine, EngineConfig, load_job
    from engine.jobs.pools import PoolSet, load_pools
    from tests.standin.server import StandIn
    from tests.support.vast import gpu_pool

    key = "vast-key-" + secrets.token_hex(16)
    os.environ["VAST_API_KEY"] = key
    job_dir = root / "hello"
    job_dir.mkdir()
    (job_dir / "job.toml").write_text('[job]\nname = "hello"\nrun = "echo hello"\n')
    job = load_job(job_dir / "job.toml")
    figures: dict[str, dict[str, list]] = {}
    with StandIn(root / "vast", key) as api:
        os.environ["SWJOB_VAST_URL"] = api.url
        api.cloud.faults.boot_delay_s = boot_delay
        local = load_pools(None).get("local").model_copy(update={"keep_warm_s": 600.0})
        vast = gpu_pool(keep_warm_s=600.0, max_nodes=rounds + 1)
        pools = PoolSet({"local": local, "gpu": vast})
        engine = Engine(EngineConfig(runs_dir=root / "runs", pools=pools))
        await engine.start()
        try:
            for pool in ("gpu", "local"):
                rows = figures.setdefault(pool, {"cold": [], "warm": []})
                for _ in range(rounds):
                    rows["cold"].append(await _timed(engine, job, pool, cold=True))
                    rows["warm"].append(await _timed(engine, job, pool, cold=False))
            figures["push"] = {"rows": await _delta(engine, root, tree_mb)}
        finally:
            problems = await engine.release_warm()
            await engine.close()
        if problems:
            raise SystemExit("; ".join(problems))
    return figures


async def _delta(engine: Engine, root: Path, tree_mb: int) -> list[dict[str, float]]:
    """The push rows (run.json) of the tree to a new local node, then to it kept warm."""
    from engine.api import load_job

    project = root / "tree"
    (project / "data").mkdir(parents=True)
    for index in range(tree_mb):
        (project / "data" / f"{index:04d}.bin").write_bytes(os.urandom(1 << 20))
    (project / "train.py").write_text("print('epoch 1')\n")
    (project / "job.toml").write_text(
        '[job]\nname = "tree"\nrun = "true"\nworkspace = { workdir = "." }\n'
    )
    job = load_job(project / "job.toml")
    rows = []
    for cold in (True, False):
        run_id = await engine.submit(job, "local", cold=cold)
        view = await engine.wait(run_id)
        rows.append(json.loads((view.run_dir / "run.json").read_text())["push"][0])
        (project / "train.py").write_text("print('epoch 2')\n")  # the one change
    return rows


def _report(figures: dict[str, dict[str, list]], rounds: int, boot_delay: float) -> None:
    print(f"hello, submit → first log line / → COMPLETED, median of {rounds} (min–max), s")
    print("| pool | node | first line | completed |")
    print("|---|---|---|---|")
    names = {"gpu": f"vastai (stand-in, {boot_delay:g} s boot)", "local": "local"}
    pushes = figures.pop("push")["rows"]
    for pool, modes in figures.items():
        for mode, runs in modes.items():
            cells = []
            for part in ("first line", "completed"):
                values = [r[part] for r in runs]
                cells.append(
                    f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"
                )
            print(f"| {names[pool]} | {mode} | {cells[0]} | {cells[1]} |")
    warm = figures["gpu"]["warm"]
    for part, goal in GOALS.items():
        worst = max(r[part] for r in warm)
        verdict = "met" if worst <= goal else "MISSED"
        print(f"goal: warm {part} ≤ {goal:g} s on vastai — {verdict} (worst {worst:.2f} s)")
    mb = pushes[0]["bytes"] / 1e6
    print(f"\npush of a {mb:.0f} MB tree, then again with one file changed (local pool):")
    print("| node | sent | reused | seconds |")
    print("|---|---|---|---|")
    for name, row in zip(("new", "warm"), pushes, strict=True):
        sent, reused = row["sent_bytes"], row["reused_bytes"] / 1e6
        print(f"| {name} | {_size(sent)} | {reused:.0f} MB | {row['seconds']:.2f} |")
    warm_push = pushes[1]
    ok = warm_push["sent_bytes"] < 1e6 and warm_push["seconds"] < 0.5
    print(f"goal: warm push sends < 1 MB in < 0.5 s — {'met' if ok else 'MISSED'}")
    print(
        f"reproduce: python -m tests.bench.warm -n {rounds} --boot-delay {boot_delay:g}"
        f" --tree-mb {round(mb / 1.048576)}"
    )


def _size(nbytes: int) -> str:
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=3, help="rounds (a cold run and a warm one)")
    parser.add_argument("--boot-delay", type=float, default=5.0, help="a new instance's pull")
    parser.add_argument("--tree-mb", type=int, default=277, help="the pushed tree's size")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="swjob-warm-") as tmp:
        root = Path(tmp)
        _isolate(root)
        figures = asyncio.run(_measure(root, args.n, args.boot_delay, args.tree_mb))
    _report(figures, args.n, args.boot_delay)


if __name__ == "__main__":
    main()
