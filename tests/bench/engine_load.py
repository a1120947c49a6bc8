"""Engine load benchmark (not part of CI): CPU time and peak memory of the engine process
while 32 jobs (the load test's workload) run on the local pool.

Only the engine's own process is measured — getrusage(RUSAGE_SELF) for user+system CPU,
/proc/self/status VmHWM for peak RSS — the agents are separate processes. State, cache
and runs live in a temp dir that is removed afterwards.

    python -m tests.bench.engine_load [--jobs 32] [--reps 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

COMMAND = "python -m tests.bench.engine_load"


def _isolate(root: Path) -> None:
    os.environ.setdefault("SWJOB_IROH_RELAY", "disabled")
    os.environ.setdefault("SWJOB_IROH_BIND", "127.0.0.1:0")
    for name in ("STATE", "CACHE", "CONFIG"):
        os.environ[f"SWJOB_{name}_DIR"] = str(root / name.lower())


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


async def _one(root: Path, jobs: int) -> tuple[float, float, int]:
    from tests.support.engines import engine_with
    from tests.support.load import load_jobs, run_load

    specs = load_jobs(root / "projects", jobs)
    async with engine_with(root / "runs") as engine:
        cpu = _cpu_s()
        result = await run_load(engine, specs, timeout=600)
        cpu = _cpu_s() - cpu
    states = sorted({v.state for v in result.views})
    print(f"  {jobs} jobs → {states}, ≤ {result.most_nodes} nodes at once")
    return result.wall_s, cpu, result.most_pending


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=32)
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="swjob-load-") as tmp:
        _isolate(Path(tmp))
        rss_start = _kib("VmRSS")
        began = time.monotonic()
        for rep in range(args.reps):
            wall, cpu, _ = asyncio.run(_one(Path(tmp) / f"rep{rep}", args.jobs))
            print(
                f"rep {rep + 1}: wall {wall:.1f} s, engine CPU {cpu:.2f} s "
                f"({cpu / wall:.0%} of one core, {cpu / args.jobs * 1000:.0f} ms per job)"
            )
        print(
            f"engine peak RSS (VmHWM) {_kib('VmHWM') / 1024:.0f} MiB "
            f"(RSS before the first run {rss_start / 1024:.0f} MiB); "
            f"total {time.monotonic() - began:.1f} s"
        )
    python = sys.version.split()[0]
    print(f"reproduce: {COMMAND} --jobs {args.jobs} --reps {args.reps}  (python {python})")


if __name__ == "__main__":
    main()
