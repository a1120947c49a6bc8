"""Node facts: the nvidia-smi parser on sample output, and the probes on this machine."""

from __future__ import annotations

import os
from pathlib import Path

from agent.facts import collect, memory_mb, parse_nvidia_smi
from agent.protocol import GpuInfo

SAMPLE = """NVIDIA GeForce RTX 4090, 24564
NVIDIA A100-SXM4-80GB, 81920

Tesla T4, [N/A]
"""


def test_parses_nvidia_smi_rows() -> None:
    assert parse_nvidia_smi(SAMPLE) == [
        GpuInfo(name="NVIDIA GeForce RTX 4090", memory_mb=24564),
        GpuInfo(name="NVIDIA A100-SXM4-80GB", memory_mb=81920),
        GpuInfo(name="Tesla T4", memory_mb=None),
    ]


def test_parser_tolerates_junk() -> None:
    assert parse_nvidia_smi("") == []
    assert parse_nvidia_smi(" , 100\n") == []
    assert parse_nvidia_smi("Odd, Name, With Commas, 8192.0") == [
        GpuInfo(name="Odd, Name, With Commas", memory_mb=8192)
    ]


def test_memory_is_the_machines_physical_memory() -> None:
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    assert memory_mb() == physical


def test_collect_on_this_machine(tmp_path: Path) -> None:
    facts = collect(tmp_path)
    assert facts.cpus >= 1 and facts.memory_mb > 0 and facts.disk_free_mb > 0
    assert facts.hostname and facts.os and facts.python_version
