"""GPU telemetry: sample `nvidia-smi` while a step runs and journal it as `GpuMetrics`.

Whether the GPU is busy is the first thing to ask of a job that bills by the hour, and
nvidia-smi is on every NVIDIA image, so the agent asks it (one short process every
`SWJOB_GPU_SAMPLE_S`, default 2 s) rather than linking NVML. A node without the tool
or without a working driver sends nothing: after a few failures in a row sampling
stops for good, so a CPU node pays for one failed spawn, not one every 2 s.

What nvidia-smi prints is untrusted (a job running as root can replace it): at most
`MAX_OUTPUT` bytes are read and `MAX_GPUS` lines kept, and the readings themselves are
checked by the message model (agent/protocol.py: finite and in range, else absent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable

from agent.protocol import MAX_GPUS, AgentEvent, GpuMetrics, GpuSample

log = logging.getLogger("swjob.agent")

SAMPLE_ENV = "SWJOB_GPU_SAMPLE_S"
DEFAULT_SAMPLE_S = 2.0
QUERY = "index,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu"
COMMAND_TIMEOUT_S = 5.0
GIVE_UP_AFTER = 3  # failures in a row: no driver, no GPU
MAX_OUTPUT = 64 * 1024  # ~100 bytes a GPU: room for MAX_GPUS many times over


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
    """`--format=csv,noheader,nounits` lines in QUERY's order; malformed lines are skipped,
    and no more than MAX_GPUS are kept."""
    gpus: list[GpuSample] = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 6 or not fields[0].isdigit() or len(fields[0]) > 4:
            continue
        if len(gpus) == MAX_GPUS:
            break
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
    assert proc.stdout is not None
    out = b""
    try:
        async with asyncio.timeout(COMMAND_TIMEOUT_S):
            while len(out) < MAX_OUTPUT and (chunk := await proc.stdout.read(MAX_OUTPUT)):
                out += chunk
            if len(out) < MAX_OUTPUT:
                await proc.wait()
    except TimeoutError:
        pass
    capped = len(out) >= MAX_OUTPUT
    if proc.returncode is None:  # printing past the cap, or hung
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
    if capped:  # more than any real board prints: its first lines, whole ones only
        return parse(out[: out.rfind(b"\n") + 1].decode(errors="replace"))
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
