"""The latest a node nobody drove can have lived: the end its own timers set.

A run's node keeps its run's caps (agent/budget.py) and gives up on an operator silent
for its orphan timeout (agent/node.py). An engine that comes back to the run, or a `swjob
gc` that finds its node gone, cannot ask the node when it went; charging up to "now"
charged the operator for the time away (and read a cap as reached that the node, having
destroyed itself long before, never reached). The node's own timers bound its life: its
cap, counted from its birth, and its orphan timeout, counted from when its operator last
spoke (the operator's last event, within a cost event's interval of its death, plus
the node's silence deadline).
"""

from __future__ import annotations

import time
from typing import Any

from agent.budget import Budget
from engine.jobs.pools import Pool
from engine.providers.base import NodeHandle, silence_for
from engine.report import events as ev
from engine.run import attempts
from engine.run.costmeter import COST_EVENT_EVERY_S
from engine.run.runrecord import PhaseClock, cost_by_phase
from engine.state.ledger import LedgerEntry, billed_from

METERED_PROVIDERS = ("vastai",)  # whose nodes are told their caps (Bootstrap.billed_since)


def last_seen(events: list[ev.Event]) -> float | None:
    """When the run's operator last recorded anything (epoch s), from its events."""
    return max((e.ts.timestamp() for e in events), default=None)


def unattended_end(
    saved: dict[str, Any],
    pool: Pool,
    attempt: attempts.Attempt | None,
    handle: NodeHandle,
    events: list[ev.Event],
) -> float | None:
    """`latest_end` of an adopted run's node: its caps as it was started (the pool kept
    with the run, else `pool`), counted for its attempt."""
    started_on = Pool.model_validate_json(saved["pool_def"]) if saved.get("pool_def") else pool
    return latest_end(attempts.capped(started_on, attempt), handle, last_seen(events))


def latest_end(pool: Pool, handle: NodeHandle, seen_at: float | None) -> float | None:
    """The latest epoch time `handle`'s node, started on `pool` (its caps as the node got
    them), can have lived with nobody driving it; None when nothing bounds it."""
    ends = []
    if seen_at is not None:
        silent = silence_for(pool.node_lost_after_s) + COST_EVENT_EVERY_S
        ends.append(seen_at + silent + pool.orphan_timeout_s)
    if pool.provider in METERED_PROVIDERS and handle.created_at is not None:
        caps = pool.caps
        budget = Budget(handle.created_at, handle.price_per_hour, caps.max_dollars, caps.max_hours)
        if (allowed := budget.allowance_s()) is not None:
            ends.append(handle.created_at + allowed)
    return min(ends, default=None)


def closing_events(
    run_id: str,
    saved: dict[str, Any],
    events: list[ev.Event],
    *,
    found_gone: bool,
    rows: list[LedgerEntry] | tuple[()] = (),
) -> list[ev.Event]:
    """What ends the record of an abandoned run's node that `swjob gc` collected: the node
    gone, and its cost — its life at its price up to its destroy (now), or, when gc found
    it already gone, up to the end its own timers set (no later than now). Its life starts
    where its ledger `rows` say (billed_from)."""
    if not saved.get("handle"):
        return []
    handle = NodeHandle(**saved["handle"])
    for row in rows:
        if row.instance_id == handle.node_id:
            handle.created_at = billed_from(handle.created_at, row)
    gone = ev.Node(
        run_id=run_id, provider=handle.provider, node_id=handle.node_id, state=ev.NodeState.GONE
    )
    if handle.price_per_hour is None or handle.created_at is None:
        return [gone]
    end = time.time()
    if found_gone and saved.get("pool_def"):
        pool = Pool.model_validate_json(saved["pool_def"])
        attempt = attempts.from_record(saved.get("attempt"))
        end = min(end, unattended_end(saved, pool, attempt, handle, events) or end)
    clock = PhaseClock()
    clock.replay(events)
    spans = [(p, b, min(e, end)) for p, b, e in clock.spans(end)]
    by_phase = cost_by_phase(handle.price_per_hour, spans, handle.created_at)
    return [gone, ev.Cost(run_id=run_id, dollars=sum(by_phase.values()), by_phase=by_phase)]
