"""The cost of a node nobody drove ends where its own timers ended it (engine/run/nodeend.py):
an operator who comes back, or a gc that finds the node gone, is not charged for the time
away, and a cap the node never reached is not read as reached."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from engine.providers.base import NodeHandle
from engine.report import events as ev
from engine.run import nodeend
from engine.run.costmeter import COST_EVENT_EVERY_S
from engine.state.ledger import LedgerEntry, billed_from
from tests.support.vast import gpu_pool

PRICE = 3.6  # $/h: $0.001 a second
BORN = 1_000_000.0


def _handle() -> NodeHandle:
    return NodeHandle(provider="vastai", node_id="7001", price_per_hour=PRICE, created_at=BORN)


def test_the_nodes_cap_bounds_its_life() -> None:
    pool = gpu_pool(caps={"max_dollars": 0.01})  # 10 s of life at $3.6/h
    assert nodeend.latest_end(pool, _handle(), seen_at=None) == pytest.approx(BORN + 10)
    local = gpu_pool(provider="local", image=None, caps={"max_dollars": 0.01})
    assert nodeend.latest_end(local, _handle(), seen_at=None) is None  # told no caps


def test_its_orphan_timeout_bounds_it_after_its_operator_fell_silent() -> None:
    pool = gpu_pool(orphan_timeout_s=30, node_lost_after_s=4)
    seen = BORN + 100
    silent = 4 + COST_EVENT_EVERY_S  # the node's silence deadline; the operator's last word
    assert nodeend.latest_end(pool, _handle(), seen) == seen + silent + 30
    capped = gpu_pool(orphan_timeout_s=30, node_lost_after_s=4, caps={"max_hours": 0.01})
    assert nodeend.latest_end(capped, _handle(), seen) == pytest.approx(BORN + 36)


def _events(run_id: str, *at: float) -> list[ev.Event]:
    return [
        ev.Transition(
            run_id=run_id,
            cause="x",
            from_state="RUNNING",
            to_state="RUNNING",
            from_phase="new",
            to_phase="run",
            ts=datetime.fromtimestamp(t, UTC),
        )
        for t in at
    ]


def test_gc_charges_a_node_found_gone_up_to_its_own_end_not_now() -> None:
    """The node destroyed itself at its orphan timeout an hour before gc found it gone."""
    now = time.time()
    born = now - 3600
    pool = gpu_pool(orphan_timeout_s=20, node_lost_after_s=5)
    handle = NodeHandle("vastai", "7001", price_per_hour=PRICE, created_at=born)
    saved = {"handle": handle.__dict__, "pool_def": pool.model_dump_json()}
    events = _events("r", born - 1)  # its run phase began before the node billed
    gone, cost = nodeend.closing_events("r", saved, events, found_gone=True)
    assert isinstance(gone, ev.Node) and gone.state is ev.NodeState.GONE
    assert isinstance(cost, ev.Cost)
    life = -1 + 5 + COST_EVENT_EVERY_S + 20  # its operator's last word, then its timers
    assert cost.dollars == pytest.approx(PRICE * life / 3600)
    assert cost.by_phase == {"run": pytest.approx(cost.dollars)}
    _, destroyed = nodeend.closing_events("r", saved, events, found_gone=False)
    assert destroyed.dollars == pytest.approx(PRICE, rel=1e-3)  # gc destroyed it: up to now


def test_gc_counts_from_the_start_the_ledger_took_from_vast() -> None:
    """The operator died a moment after Vast reported the node's start: its ledger row has
    that start, its run index row still the intent's (the moment before the create). gc
    counts from the ledger's, as the node did; a handle counting from a warm claim keeps
    its own."""
    intent, reported = time.time() - 100, time.time() - 99
    row = LedgerEntry(1, "r", "vastai", "gpu", "swjob:r", "7001", intent, reported, None)
    assert billed_from(intent, row) == billed_from(None, row) == reported
    assert billed_from(intent + 50, row) == intent + 50  # a warm claim's
    handle = NodeHandle("vastai", "7001", price_per_hour=PRICE, created_at=intent)
    saved = {"handle": handle.__dict__}
    events = _events("r", intent)
    _, cost = nodeend.closing_events("r", saved, events, found_gone=False, rows=[row])
    assert cost.dollars == pytest.approx(PRICE * (time.time() - reported) / 3600, rel=1e-3)
