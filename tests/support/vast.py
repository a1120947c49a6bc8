"""Shared pieces of the Vast.ai tests: the stand-in (the `api` fixture's body), pools on it,
a provider with fast retries, a bootstrap for it."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.jobs.pools import Pool
from engine.providers.base import Bootstrap
from engine.providers.vast_api import BACKOFF_ENV, RetryPolicy
from engine.providers.vastai import VastProvider
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.cli import Cli
from tests.support.waiting import eventually

FAST = RetryPolicy(attempts=4, base_s=0.01, max_s=0.05, timeout_s=10)
TOKEN = "join-token-" + "z" * 20


def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    """A stand-in with a fresh API key in VAST_API_KEY (the SDK's own resolution),
    SWJOB_VAST_URL pointing at it and FAST's back-off; every test must leave no instance
    behind."""
    key = "vast-key-" + secrets.token_hex(16)
    monkeypatch.setenv("VAST_API_KEY", key)
    # a real `swjob` retries the stand-in's refusals as fast as FAST does, not for ~30 s
    monkeypatch.setenv(BACKOFF_ENV, str(FAST.base_s))
    with StandIn(tmp_path / "vast", key) as api:
        monkeypatch.setenv("SWJOB_VAST_URL", api.url)
        yield api
    assert api.leaked == [], f"instances left alive: {api.leaked}"


AGENT_INSTALL = "swjob==0.1.0"  # already in this venv: the instance's install finds it there
POOLS_FILE = (
    f'[pools.gpu]\nprovider = "vastai"\nimage = "img"\nagent_install = "{AGENT_INSTALL}"\n'
    "[pools.gpu.resources]\ngpu_count = 1\n"
)
"""A user's pools file naming one Vast.ai pool, `gpu`, on the stand-in: for real `swjob`s."""


def gpu_pool(name: str = "gpu", **overrides: Any) -> Pool:
    """1 GPU ≥ 24 GB, ≤ $0.60/h, reliability ≥ 0.98, verified hosts, cheapest first."""
    fields: dict[str, Any] = {
        "provider": "vastai",
        "max_nodes": 2,
        "boot_timeout_s": 60.0,
        "image": "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime",
        "resources": {"gpu_count": 1, "gpu_memory_mb": 24000, "disk_mb": 40000},
        "selection": {"max_price_per_hour": 0.6, "reliability_min": 0.98},
        "agent_install": AGENT_INSTALL,
    }
    fields.update(overrides)
    return Pool(name=name, **fields)


def provider(api: StandIn, pool: Pool, alerts: list[str], **kwargs: Any) -> VastProvider:
    return VastProvider(
        pool, Ledger(), server_url=api.url, on_alert=alerts.append, retry=FAST, **kwargs
    )


def bootstrap(run_id: str = "run-1") -> Bootstrap:
    return Bootstrap(run_id=run_id, ticket="not-a-ticket", orchestrator_id="o" * 64, token=TOKEN)


def killed_while_creating(
    api: StandIn, clis: Callable[..., Cli], folder: Path, pools: Path
) -> None:
    """`swjob run` of a one-line job (`crashy`) on `pools`' gpu pool from `folder`, killed
    with -9 once its create call (PUT /asks/<offer>/) is sent: with the stand-in's
    `create_delay_s` the create is still in flight, and Vast answers it after the kill."""
    (folder / "job.toml").write_text('[job]\nname = "crashy"\nrun = "true"\n')
    cli = clis("run", "job.toml", "--pool", "gpu", "--pools", str(pools), cwd=folder)
    eventually(
        lambda: any(m == "PUT" and "/asks/" in path for m, path, *_ in api.requests),
        what="the create call sent",
    )
    cli.kill9()
