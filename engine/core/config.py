"""The Engine's settings, its one-line submit error, and how run ids are drawn."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import SwjobError
from engine.jobs.pools import PoolSet, load_pools
from engine.state.paths import DEFAULT_RUNS_DIR


class SubmitError(SwjobError):
    """The run could not be submitted; one line for the user."""


@dataclass
class EngineConfig:
    runs_dir: Path = DEFAULT_RUNS_DIR
    pools: PoolSet = field(default_factory=load_pools)
    heartbeat_s: float = 2.5
    """How often each side of a run's control connection says it is alive when nothing
    else needs saying: a quarter of the local pool's 10 s silence deadline (and of the
    agent's own, AGENT_SILENCE_MAX_S), so a peer still misses three in a row before it is
    taken for lost. A pool that takes silence for a loss sooner gets faster ones
    (providers/base.heartbeat_for). Every heartbeat costs both sides a frame, a QUIC
    packet and its acknowledgement: at 1 s they were most of what a hundred short runs at
    once cost the engine (tests/bench/engine_load.py)."""
    stop_grace_s: float = 10.0
    adopt_orphans: bool = False
    """Adopt every unfinished run whose owner is gone, at start and every ADOPT_SCAN_S
    (the console); `swjob run` leaves other runs alone."""
    warm_agents: bool = False
    """Start the local agents' fork server with the engine (the console: its first local
    run then does not wait for an agent's imports either)."""


def new_run_id() -> str:
    """Timestamp plus 32 random bits: 32 submits in one second collide with p ~ 1e-7
    (16 bits gave ~0.8%, and a collision overwrote the other run's driver)."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
