"""Whether a PENDING run is waiting for a free node of its pool, and for how long.

The engine provisions a run's node only once the pool has a slot (`max_nodes`); until
then the run is PENDING · provisioning with no node at all. "provisioning" would be a
lie there: nothing is being rented. The pool views say how many nodes are busy, so
the console can say "queued (4 of 4 nodes busy)" and time the wait on its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from engine.api import PoolView, RunView, events
from tui import format as fmt


@dataclass(frozen=True)
class Queued:
    busy: int
    max_nodes: int
    since: datetime  # when the run started waiting (its provisioning step began)

    def describe(self, now: datetime) -> str:
        """'queued (4 of 4 nodes busy) for 12s'."""
        wait = fmt.duration(now - self.since)
        return f"queued ({self.busy} of {self.max_nodes} nodes busy) for {wait}"


def busy_by_pool(pools: list[PoolView], runs: Iterable[RunView] = ()) -> dict[str, tuple[int, int]]:
    """Pool name → (nodes up, max_nodes): this engine's nodes, and those of `runs` other
    swjob processes drive (or drove: their owner died) — a pool's max_nodes holds across
    processes, so a run here waits for those too, and "provisioning" would be a lie."""
    elsewhere = Counter(
        run.pool
        for run in runs
        if not run.live and run.finished is None and run.node is not None
        and run.node.state != events.NodeState.GONE
    )  # fmt: skip
    return {pool.name: (len(pool.nodes) + elsewhere[pool.name], pool.max_nodes) for pool in pools}


def queued(run: RunView, busy: dict[str, tuple[int, int]]) -> Queued | None:
    """The run's wait for a node, or None when it is not waiting for one."""
    if run.state != "PENDING" or run.phase != "provisioning" or run.node is not None:
        return None
    if not run.live or run.pool not in busy:
        return None
    up, most = busy[run.pool]
    if up < most:
        return None  # a slot is free: its node is being started or rented
    since = run.timeline[-1].ts if run.timeline else run.created
    return Queued(up, most, since)
