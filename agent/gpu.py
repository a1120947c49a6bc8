"""GPU telemetry: sample `nvidia-smi` while a step runs and journal it as `GpuMetrics`.

Whether the GPU is busy is the first thing to ask of a job that bills by the hour, and
nvidia-smi is on every NVIDIA image, so the agent asks it (one short process every
`SWJOB_GPU_SAMPLE_S`, default 2 s) rather than linking NVML. A node without the tool
or without a working driver sends nothing: after a few failures in a row sampling
stops for good, so a CPU node pays for one failed spawn, not one every 2 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable

from agent.protocol import AgentEvent, GpuMetrics, GpuSample

log = logging.getLogger("swjob.agent")

SAMPLE_ENV = "SWJOB_GPU_SAMPLE_S"
DEFAULT_SAMPLE_S = 2.0
QUERY = "index,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu"
COMMAND_TIMEOUT_S = 5.0
GIVE_UP_AFTER = 3  # failures in a row: no driver, no GPU


def sample_interval() -> float:
    """The sampling period: SWJOB_GPU_SAMPLE_S (tests use tenths of a second)."""
    try:
        value = float(os.environ.get(SAMPLE_ENV) or DEFAULT_SAMPLE_S)
    except ValueError:
        return DEFAULT_SAMPLE_S
    return value if value > 0 else DEFAULT_SAMPLE_S


def _number(field: str) -> float | None:
    try:
        return float(field)
    except ValueError:  # "[N/A]", "[Not Supported]", "" on some boards
        return None


def parse(text: str) -> list[GpuSample]:
    """`--format=csv,noheader,nounits` lines in QUERY's order; malformed lines are skipped."""
    gpus = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 6 or not fields[0].isdigit():
            continue
        util, used, total, power, temp = (_number(f) for f in fields[1:])
        gpus.append(
            GpuSample(
                index=int(fields[0]),
                util_pct=util,
                mem_used_mb=used,
                mem_total_mb=total,
                power_w=power,
                temp_c=temp,
            )
        )
    return gpus


async def query(exe: str) -> list[GpuSample]:
    """One sample of every GPU; empty when nvidia-smi fails or says nothing usable."""
    proc = await asyncio.create_subprocess_exec(
        exe,
        f"--query-gpu={QUERY}",
        "--format=csv,noheader,nounits",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(COMMAND_TIMEOUT_S):
            out, _ = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return []
    return parse(out.decode(errors="replace")) if proc.returncode == 0 else []


async def sample_while(busy: Callable[[], bool], emit: Callable[[AgentEvent], object]) -> None:
    """Emit a GpuMetrics every interval while `busy()`; return when there is nothing to see."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return
    interval = sample_interval()
    failures = 0
    while failures < GIVE_UP_AFTER:
        if busy():
            try:
                gpus = await query(exe)
            except OSError:
                gpus = []
            failures = 0 if gpus else failures + 1
            if gpus:
                emit(GpuMetrics(seq=0, t=time.time(), gpus=gpus))
        await asyncio.sleep(interval)
    log.info("nvidia-smi gave nothing %d times in a row: no GPU telemetry", GIVE_UP_AFTER)
