"""What a node tells its orchestrator about itself when it joins.

The operator sees these on the board and in run.json: they are how one checks that
the rented machine is the one that was paid for (GPU model and memory above all).
Every probe is best-effort; a missing tool or file yields an empty or zero value,
never a failed join.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path

import agent
from agent.protocol import MAX_GPUS, GpuInfo, NodeFacts

NVIDIA_SMI_ARGS = ["--query-gpu=name,memory.total", "--format=csv,noheader,nounits"]
NVIDIA_SMI_TIMEOUT_S = 10.0


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """Parse `name, memory_mb` CSV rows; a row with an unreadable memory keeps its name.
    At most MAX_GPUS: what nvidia-smi prints is untrusted (agent/gpu.py)."""
    gpus: list[GpuInfo] = []
    for row in text.splitlines()[:MAX_GPUS]:
        head, sep, memory = row.rpartition(",")
        name = (head if sep else memory).strip()
        if not name:
            continue
        try:
            memory_mb: int | None = int(float(memory)) if sep else None
        except (ValueError, OverflowError):  # nan, inf
            memory_mb = None
        gpus.append(GpuInfo(name=name, memory_mb=memory_mb))
    return gpus


def probe_gpus() -> list[GpuInfo]:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return []
    try:
        out = subprocess.run(
            [binary, *NVIDIA_SMI_ARGS],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi(out)


def memory_mb() -> int:
    """Physical memory in MiB, 0 when unknown. sysconf asks the kernel directly (Linux and
    macOS alike), so it needs no /proc."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)
    except (OSError, ValueError):
        return 0


def disk_free_mb(root: Path) -> int:
    try:
        return shutil.disk_usage(root).free // (1024 * 1024)
    except OSError:
        return 0


def collect(root: Path) -> NodeFacts:
    return NodeFacts(
        hostname=socket.gethostname(),
        os=platform.platform(),
        cpus=os.cpu_count() or 0,
        memory_mb=memory_mb(),
        disk_free_mb=disk_free_mb(root),
        gpus=probe_gpus(),
        python_version=platform.python_version(),
        agent_version=agent.__version__,
    )
