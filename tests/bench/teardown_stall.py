"""Event-loop stalls of the console while a big local node is torn down and while many
runs start at once (not CI). The console froze 15–17 s when a local node with 8,000
files (900 MB) was torn down: the tree was removed on its loop. Goal: no stall over 50 ms.

The real swjob-tui runs headless with a real engine on the local pool. Two phases, each
probed as tests/bench/loop_stall.py probes (a 5 ms sleep, how late it wakes), beside the
same probe on a bare loop in a sibling process (the control: the machine's own delays):

- teardown: a job writes `--files` files of `--mib` MiB in all into its workspace and
  ends; probed from its submission until its node's directory is gone;
- start: `--runs` jobs submitted at once, probed until every one ended and its node is gone;
  on the local pool as the console has it (its nodes give way: `node_nice` 10), then,
  the baseline of the same run, at `node_nice` 0 (each node its session's share: the
  engine's and the CLI's default).

A phase of size 0 is skipped; `--attribute` names where the loop was while stalled.
Beside the stalls (wall time: on a busy machine the loop also waits for a core) it prints
the most CPU the loop's thread used between two turns, which the machine's load does not
stretch: the work that held the loop.

    python -m tests.bench.teardown_stall [--files 10000] [--mib 1024] [--runs 12] [--attribute]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.bench.loop_stall import Control, Probe, cpu, inflation, lags, report

COMMAND = "python -m tests.bench.teardown_stall"
WRITE = """import os, sys
files, size = int(sys.argv[1]), int(sys.argv[2])
block = b"x" * size
for i in range(files):
    d = f"tree/{i // 100}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/{i}", "wb") as f:
        f.write(block)
"""


def job(tmp: Path, name: str, run: str) -> Path:
    folder = tmp / name
    folder.mkdir()
    (folder / "write.py").write_text(WRITE)
    folder.joinpath("job.toml").write_text(
        f'[job]\nname = "{name}"\nrun = "{run}"\nworkspace = {{ workdir = "." }}\n'
    )
    return folder / "job.toml"


def nodes_left() -> bool:
    from engine.state.paths import cache_dir

    nodes = cache_dir() / "nodes"
    return nodes.exists() and any(nodes.iterdir())


async def probed(what: str, work: Callable[[], Awaitable[None]], attribute: bool) -> None:
    """Run `work()` under the probe and the control; print its figures (and with
    `attribute`, where the loop was while stalled)."""
    control = Control()
    await control.start()
    probe = Probe(attribute)
    probe.start()
    started = time.perf_counter()
    await work()
    while nodes_left():
        await asyncio.sleep(0.05)
    took = time.perf_counter() - started
    await probe.stop()
    idle = await control.stop()
    print(f"{what:9}: {took:.1f} s; load average {os.getloadavg()[0]:.2f}")
    print(f"{'':9}  " + lags("swjob-tui's loop:", probe.lags))
    print(f"{'':9}  " + cpu("its", probe.busy))  # what a loaded machine does not stretch
    print(f"{'':9}  " + lags("control, a bare loop:", idle))
    print(f"{'':9}  " + cpu("its", control.busy))
    print(f"{'':9}  " + inflation(control.units))
    if attribute:
        report(probe)


async def bench(tmp: Path, files: int, mib: int, runs: int, attribute: bool) -> None:
    from engine.engine import Engine, EngineConfig
    from engine.jobs.jobspec import load_job
    from tui.app import SwjobApp, console_pools

    pools = console_pools(None)  # as swjob-tui loads them
    local = pools.get("local").model_copy(update={"max_nodes": max(runs, 1)})
    equal = local.model_copy(update={"name": "equal", "node_nice": 0})
    every = {pool.name: pool for pool in (*pools, local, equal)}
    engine = Engine(EngineConfig(runs_dir=tmp / "runs", pools=type(pools)(every, pools.source)))
    app = SwjobApp(engine)
    size = max(1, (mib << 20) // max(files, 1))
    async with app.run_test(size=(130, 40)):
        await asyncio.wait_for(app.booted.wait(), 60)
        big = load_job(job(tmp, "big", f"python3 write.py {files} {size}"))

        async def teardown() -> None:
            view = await engine.wait(await engine.submit(big, "local"))
            assert view.state == "COMPLETED", view.reason

        small = load_job(job(tmp, "small", "true"))

        def start(pool: str) -> Callable[[], Awaitable[None]]:
            async def started() -> None:
                ids = await asyncio.gather(*(engine.submit(small, pool) for _ in range(runs)))
                await asyncio.gather(*(engine.wait(run_id) for run_id in ids))

            return started

        print(f"command  : {COMMAND} --files {files} --mib {mib} --runs {runs}")
        print(f"machine  : {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
        if files:
            await probed(f"teardown of {files} files, {mib} MiB", teardown, attribute)
        if runs:
            console = f"as swjob-tui starts them (node_nice {local.node_nice})"
            await probed(f"{runs} runs started at once, {console}", start("local"), attribute)
            baseline = "baseline: node_nice 0 (swjob run's, the API's)"
            await probed(f"{runs} runs started at once, {baseline}", start("equal"), attribute)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000, help="files in the workspace")
    parser.add_argument("--mib", type=int, default=1024, help="their size in all")
    parser.add_argument("--runs", type=int, default=12, help="runs started at once")
    parser.add_argument("--attribute", action="store_true", help="sample where the loop stalls")
    args = parser.parse_args()
    os.environ.setdefault("SWJOB_IROH_RELAY", "disabled")
    os.environ.setdefault("SWJOB_IROH_BIND", "127.0.0.1:0")
    tmp = Path(tempfile.mkdtemp(prefix="swjob-teardown-"))
    for name in ("STATE", "CACHE", "CONFIG"):
        os.environ[f"SWJOB_{name}_DIR"] = str(tmp / name.lower())
    try:
        asyncio.run(bench(tmp, args.files, args.mib, args.runs, args.attribute))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
