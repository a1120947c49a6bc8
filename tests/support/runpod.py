"""Shared pieces of the RunPod tests: the GraphQL stand-in with a fresh account key in
RUNPOD_API_KEY and the SDK pointed at it (RUNPOD_API_BASE_URL), and pools on it."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.jobs.pools import Pool
from tests.standin.runpod_server import RunPodStandIn
from tests.support.vast import AGENT_INSTALL


def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunPodStandIn]:
    """Every test must leave no pod alive."""
    key = "rpa_" + secrets.token_hex(16)
    monkeypatch.setenv("RUNPOD_API_KEY", key)
    with RunPodStandIn(tmp_path / "runpod", key) as api:
        monkeypatch.setenv("RUNPOD_API_BASE_URL", api.url)
        yield api
    assert api.leaked == [], f"pods left alive: {api.leaked}"


def pod_pool(name: str = "pod", **overrides: Any) -> Pool:
    """1 GPU ≥ 24 GB, ≤ $0.60/h, either cloud, cheapest first."""
    fields: dict[str, Any] = {
        "provider": "runpod",
        "max_nodes": 2,
        "boot_timeout_s": 60.0,
        "image": "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04",
        "resources": {"gpu_count": 1, "gpu_memory_mb": 24000},
        "selection": {"max_price_per_hour": 0.6},
        "agent_install": AGENT_INSTALL,
    }
    fields.update(overrides)
    return Pool(name=name, **fields)
