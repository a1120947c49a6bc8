"""The host pre-flight's checks (agent/preflight.py): what a node's nvidia-smi, disk, clock
and CUDA probe say becomes a verdict per check; a node without a way to run a CUDA check
skips it (no failure). The whole run of checks on this machine, with a played nvidia-smi."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from agent import gpu, preflight
from agent.protocol import Preflight, PreflightDone, decode, encode
from tests.standin import gpus as host_gpus


def _gpus(*memory: float) -> list:
    return [gpu.GpuSample(index=i, mem_total_mb=m) for i, m in enumerate(memory)]


def test_gpus_visible_must_be_what_the_pool_asked() -> None:
    assert preflight.gpus_check(_gpus(24564), 1, 24000).ok
    none = preflight.gpus_check([], 1, None)
    assert not none.ok and none.detail == "0 GPUs visible, the pool asked for 1"
    assert not preflight.gpus_check(_gpus(24564, 24564), 1, None).ok  # another's boards
    small = preflight.gpus_check(_gpus(24564, 11019), 2, 24000)
    assert not small.ok and "GPU 1: 11019 MB" in small.detail
    assert preflight.gpus_check(_gpus(16376), 1, 16384).ok  # a board's own "16 GB"


def test_the_driver_answers_or_says_no_devices() -> None:
    assert preflight.driver_check(0, "0, 1, 2, 3, 4, 5\n").ok
    assert preflight.driver_check(6, "No devices were found\n").ok  # answered: zero boards
    broken = preflight.driver_check(9, "NVIDIA-SMI has failed because it couldn't communicate")
    assert not broken.ok and "exit 9" in broken.detail and "couldn't communicate" in broken.detail
    assert "did not answer" in preflight.driver_check(None, "").detail


def test_a_cuda_check_is_skipped_where_the_image_cannot_run_one() -> None:
    skipped = preflight.cuda_verdict(preflight.NO_TORCH, "")
    assert skipped.ok and skipped.skipped and "no torch" in skipped.detail
    assert preflight.cuda_verdict(0, "2.4.0 NVIDIA A100 8.0\n").ok
    failed = preflight.cuda_verdict(1, "RuntimeError: CUDA error: no kernel image is available")
    assert not failed.ok and "no kernel image" in failed.detail


def test_disk_and_clock() -> None:
    assert preflight.disk_check(40_000, 40_000).ok
    assert not preflight.disk_check(39_999, 40_000).ok
    assert preflight.clock_check(1000.4, 1000.0, 120).ok
    late = preflight.clock_check(1000.0, 4600.0, 120)
    assert not late.ok and late.detail.startswith("3600.0 s behind")


def test_the_answer_travels_bounded() -> None:
    checks = [preflight.disk_check(1, 2)] * 40
    sent = decode(encode(PreflightDone(seq=3, checks=checks))[4:])
    assert isinstance(sent, PreflightDone) and len(sent.checks) == 16 and sent.failed


def test_a_node_showing_no_gpus_fails_and_one_showing_them_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    asked = Preflight(gpu_count=1, gpu_memory_mb=24000, disk_mb=1, operator_time=time.time())
    host_gpus.install(tmp_path, 0, "RTX 4090", 24564)
    names = [(c.name, c.ok) for c in asyncio.run(preflight.run(asked, tmp_path))]
    assert names == [("driver", True), ("gpus", False), ("disk", True), ("clock", True)]
    host_gpus.install(tmp_path, 1, "RTX 4090", 24564)
    checks = asyncio.run(preflight.run(asked, tmp_path))
    assert [c.name for c in checks] == ["driver", "gpus", "cuda", "disk", "clock"]
    assert all(c.ok for c in checks)
    cpu = Preflight(operator_time=time.time())  # a CPU pool: only the clock
    assert [c.name for c in asyncio.run(preflight.run(cpu, tmp_path))] == ["clock"]
