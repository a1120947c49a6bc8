"""Engine load benchmark (not part of CI): 100 jobs at once on the local pool — the engine's
CPU per job, the operator's peak RSS, and the console's key latency with 100 live runs on
its board.

Two phases, each in a fresh engine with the local pool's `max_nodes` raised to the job
count so every run is live at once:

1. engine: the load test's workload (tests/support/load.py: a one-line workspace pushed,
   a few lines printed, an output pulled) submitted at once and waited for, with the
   engine's own settings (2.5 s heartbeat, 10 s stop grace; `--test-deadlines`: the tests'
   0.5 s and 2 s, five times the heartbeats, as figures before 2026-12-06 were measured). Only
   the engine's own process is measured — getrusage(RUSAGE_SELF) for user+system CPU,
   /proc/self/status VmHWM for peak RSS — the agents are separate processes.
2. console: the real app (headless, 160×50) with its engine; the same number of jobs that
   print a line and wait for a release file, all RUNNING on the board. Every 50 ms a
   board key (`j`/`k`, moving the cursor) and a probe key are posted; the probe's latency is
   the time until its action runs behind them. Then the jobs are released.

State, cache and runs live in a temp dir that is removed afterwards. Goals (issue 33):
≤ 20 ms engine CPU per job, ≤ 300 MB operator RSS, key p95 < 100 ms.

    python -m tests.bench.engine_load [--jobs 100] [--reps 1] [--keys 200] [--no-console]
                                      [--test-deadlines] [--node-nice N]
                                      [--state-on ext4|tmp]

State lives on a fresh journaled ext4, loop-mounted for the run (as root; the transfer
bench's `node_disk`), like the disk of the laptop the engine runs on. This machine's own
disk is ext4 without a journal, where the kernel checks every inode freed in the last
minute before it hands one out (`recently_deleted`): after a test suite or the previous
rep had deleted its files a new file or directory cost 0.2-1 ms of kernel CPU there
against ~40 µs on the journaled disk, and a run makes ~15 of them, so the engine's CPU
per job read 37-48 ms there against 19-24 ms on the journaled disk in the same hour
(perf: `openat` and `mkdir` a third of the engine's CPU). `--state-on tmp` keeps the
state in TMPDIR to see that; without root it is the only choice. Either way the cost of
a new directory there is printed first, so that runs are compared in like states.

`--node-nice`: the console phase's nodes at this `node_nice` (default: the console's,
10, tui.app.NODE_NICE; 0: each node its session's full share; agent/priority.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.keyprobe import press_keys, probe_app

if TYPE_CHECKING:
    from engine.jobs.jobspec import JobSpec
    from engine.report.views import RunView

COMMAND = "python -m tests.bench.engine_load"
BOOT_WAIT_S = 120.0


def _isolate(root: Path) -> None:
    os.environ.setdefault("SWJOB_IROH_RELAY", "disabled")
    os.environ.setdefault("SWJOB_IROH_BIND", "127.0.0.1:0")
    for name in ("STATE", "CACHE", "CONFIG"):
        os.environ[f"SWJOB_{name}_DIR"] = str(root / name.lower())


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _mkdir_us(root: Path, count: int = 200) -> float:
    """What making a directory costs where the state lives (a run makes ~15 new files and
    directories on the engine's side): ~40 µs of CPU on a fresh journaled ext4; on this
    machine's own disk 25-35 µs idle and 0.2-1 ms for minutes after a test suite had
    deleted its gigabytes. Printed beside the figures, so that runs are compared in like
    states of the disk."""
    probe = root / "mkdir-probe"
    probe.mkdir()
    began = time.thread_time()
    for i in range(count):
        (probe / str(i)).mkdir()
    spent = time.thread_time() - began
    shutil.rmtree(probe)
    return spent / count * 1e6


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


async def _one(root: Path, jobs: int, quick: bool) -> tuple[float, float, int]:
    from engine.engine import EngineConfig
    from tests.support.engines import QUICK, engine_with
    from tests.support.load import load_jobs, run_load

    specs = load_jobs(root / "projects", jobs)
    settings = QUICK if quick else {"heartbeat_s": EngineConfig.heartbeat_s}  # its defaults
    grace_s = settings.get("stop_grace_s", EngineConfig.stop_grace_s)
    async with engine_with(
        root / "runs", max_nodes=max(jobs, 1), heartbeat_s=settings["heartbeat_s"], grace_s=grace_s
    ) as engine:
        cpu = _cpu_s()
        result = await run_load(engine, specs, timeout=600)
        cpu = _cpu_s() - cpu
    states = sorted({v.state for v in result.views})
    print(f"  {jobs} jobs → {states}, ≤ {result.most_nodes} nodes at once")
    # half the jobs exit 1 by design; any other failure did less work (say, no outputs
    # pulled) and so lowers the CPU per job: it is counted, not hidden
    other = Counter(v.reason for v in result.views if v.reason and "exited with" not in v.reason)
    if other:
        print(f"  failed otherwise: {dict(other)}")
    return result.wall_s, cpu, result.most_nodes


async def _console(root: Path, jobs: int, keys: int, nice: int | None) -> list[float]:
    """Key latencies (ms) with `jobs` live runs on the console's board. While the keys are
    pressed the loop is probed beside a bare loop in a sibling process (the control), as
    tests/bench/loop_stall.py does: latency is wall time, which a loaded machine stretches;
    the loop's own CPU between two turns is what the console spent."""
    from engine.engine import Engine, EngineConfig
    from tests.bench.loop_stall import Control, Probe, lags
    from tests.support.engines import local_pools
    from tui.app import NODE_NICE

    release = root / "release"
    specs = [_live_job(root / f"live{i:03d}", release) for i in range(jobs)]
    # the console's own settings (2.5 s heartbeat, 10 s to lose a node), not the tests' quick ones
    # and its nodes at the console's `node_nice` (tui.app.NODE_NICE) unless one is given
    pools = local_pools(max_nodes=max(jobs, 1), **({} if nice is None else {"node_nice": nice}))
    pools = pools.giving_way(NODE_NICE)
    engine = Engine(EngineConfig(runs_dir=root / "runs", pools=pools))
    app = probe_app(engine)
    async with app.run_test(size=(160, 50)):
        async with asyncio.timeout(60):
            await app.booted.wait()
        ids = [await engine.submit(spec, "local") for spec in specs]
        began = said = time.monotonic()
        while not all(_live_or_ended(engine.run(i)) for i in ids):
            if time.monotonic() - began > BOOT_WAIT_S:  # measure the keys with what is live
                print(f"  not every node joined within {BOOT_WAIT_S:g} s")
                break
            await asyncio.sleep(0.2)
            if time.monotonic() - said >= 10:  # where they are, while a hundred boot
                said = time.monotonic()
                phases = Counter(engine.run(i).phase for i in ids)  # type: ignore[union-attr]
                print(f"  {said - began:.0f} s: {dict(phases)}", flush=True)
        live = sum(engine.run(i).state == "RUNNING" for i in ids)  # type: ignore[union-attr]
        print(f"  {live} of {jobs} runs RUNNING on the board; pressing keys")
        control, probe = Control(), Probe(attribute=False)
        await control.start()
        probe.start()
        latencies = await press_keys(app, keys)
        await probe.stop()
        idle = await control.stop()
        busy = sorted(probe.busy)
        print("  " + lags("swjob-tui's loop:", probe.lags) + "; " + lags("control:", idle))
        print(
            f"  the loop's own CPU between two turns: p95 {_p95(busy) * 1000:.1f} ms, "
            f"max {busy[-1] * 1000:.1f} ms; in all {probe.cpu[0]:.1f} s "
            f"(load average {os.getloadavg()[0]:.1f})"
        )
        release.touch()
        async with asyncio.timeout(600):
            views = await asyncio.gather(*(engine.wait(i) for i in ids))
    failed = [v for v in views if v.state != "COMPLETED"]
    if failed:  # the figures stand, but say what went wrong (e.g. nodes lost under load)
        reasons = sorted({v.reason or "" for v in failed})
        print(f"  {len(failed)} of {jobs} live runs did not complete: {reasons}")
    return latencies


def _p95(ordered: list[float]) -> float:
    return ordered[max(0, int(len(ordered) * 0.95) - 1)]


def _live_or_ended(view: RunView | None) -> bool:
    """The run's job is running, or it ended without getting there (a node lost)."""
    return view is not None and (view.state == "RUNNING" or view.terminal)


def _live_job(project: Path, release: Path) -> JobSpec:
    """A job that prints a line and waits for `release`, polling once a second: a hundred
    of them polling ten times a second (tests/support/runs.waiting_job) forked a thousand
    `sleep`s a second and measured the machine, not the console."""
    from engine.jobs.jobspec import load_job

    project.mkdir(parents=True)
    run = f"echo live; while [ ! -e {release} ]; do sleep 1; done"
    (project / "job.toml").write_text(f'[job]\nname = "{project.name}"\nrun = "{run}"\n')
    return load_job(project / "job.toml")


@contextlib.contextmanager
def _state_disk(where: str) -> Iterator[str]:
    """A temp dir for the state: on a fresh journaled ext4 (the module's docstring says
    why) or in TMPDIR, where no ext4 can be made or mounted here (no mkfs, no loop
    devices); removed afterwards."""
    from tests.bench.transfer import node_disk

    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="swjob-load-"))
        if where == "ext4":
            try:
                tmp = str(stack.enter_context(node_disk(Path(tmp), "4G")))
            except (OSError, subprocess.CalledProcessError) as exc:
                print(f"no journaled ext4 for the state ({exc}): it stays in TMPDIR")
        yield tmp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--keys", type=int, default=200, help="key presses in the console phase")
    parser.add_argument("--no-console", action="store_true", help="skip the console phase")
    parser.add_argument(
        "--test-deadlines", action="store_true", help="the engine phase with the tests' deadlines"
    )
    parser.add_argument("--node-nice", type=int, help="the console phase's nodes' node_nice")
    parser.add_argument(
        "--state-on",
        choices=("ext4", "tmp"),
        default="ext4" if os.geteuid() == 0 else "tmp",
        help="where state and runs live: a fresh journaled ext4 (root) or TMPDIR",
    )
    args = parser.parse_args()
    with _state_disk(args.state_on) as tmp:
        _isolate(Path(tmp))
        print(f"state in {tmp}: {_mkdir_us(Path(tmp)):.0f} µs of CPU a new directory")
        rss_start = _kib("VmRSS")
        began = time.monotonic()
        per_job = []
        for rep in range(args.reps):
            run = _one(Path(tmp) / f"rep{rep}", args.jobs, args.test_deadlines)
            wall, cpu, _ = asyncio.run(run)
            per_job.append(cpu / args.jobs * 1000)
            print(
                f"rep {rep + 1}: wall {wall:.1f} s, engine CPU {cpu:.2f} s "
                f"({cpu / wall:.0%} of one core, {per_job[-1]:.0f} ms per job)"
            )
        if per_job:
            median = statistics.median(per_job)
            print(f"engine CPU per job: median {median:.1f} ms of {len(per_job)} reps")
        print(
            f"engine peak RSS (VmHWM) {_kib('VmHWM') / 1024:.0f} MiB "
            f"(RSS before the first run {rss_start / 1024:.0f} MiB); "
            f"total {time.monotonic() - began:.1f} s"
        )
        if not args.no_console:
            phase = _console(Path(tmp) / "console", args.jobs, args.keys, args.node_nice)
            lat = sorted(asyncio.run(phase))
            p95 = _p95(lat)
            print(
                f"console with {args.jobs} live runs: {len(lat)} keys, latency p50 "
                f"{statistics.median(lat):.1f} ms, p95 {p95:.1f} ms, max {lat[-1]:.1f} ms; "
                f"operator peak RSS (engine + console) {_kib('VmHWM') / 1024:.0f} MiB"
            )
    python = sys.version.split()[0]
    console = " --no-console" if args.no_console else f" --keys {args.keys}"
    console += " --test-deadlines" if args.test_deadlines else ""
    console += "" if args.node_nice is None else f" --node-nice {args.node_nice}"
    console += " --state-on tmp" if args.state_on == "tmp" else ""
    print(f"reproduce: {COMMAND} --jobs {args.jobs} --reps {args.reps}{console}  (python {python})")


if __name__ == "__main__":
    main()
