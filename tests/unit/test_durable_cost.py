"""The pure parts of durable cost and of an orphan's self-destroy: the wall-clock phase
clock rebuilt from events, cost clipped to the node's life, the ledger's upgrade of an
older file, the container credential's sources, and what counts as "gone"."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.orphan import container_credential, parse_environ
from engine.providers.vast_api import VastApiError
from engine.report import events as ev
from engine.run.runrecord import PhaseClock, cost_by_phase
from engine.state.ledger import Ledger

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def _transition(to_phase: str, at_s: float) -> ev.Transition:
    return ev.Transition(
        run_id="r",
        ts=T0 + timedelta(seconds=at_s),
        cause="x",
        from_state=None,
        to_state="RUNNING",
        from_phase="new",
        to_phase=to_phase,
    )


def test_a_replayed_clock_keeps_the_time_spent_while_nobody_watched() -> None:
    """Transitions at 0 s (provisioning), 10 s (run); the engine died at 20 s and came back
    at 100 s: the run phase holds everything from 10 s on, the gap included."""
    clock = PhaseClock()
    clock.replay([_transition("provisioning", 0), _transition("run", 10)])
    until = (T0 + timedelta(seconds=100)).timestamp()
    assert clock.durations(until) == {"provisioning": 10.0, "run": 90.0}
    assert clock.entered["run"] == T0 + timedelta(seconds=10)


def test_cost_counts_only_while_the_node_was_alive() -> None:
    """$3.60/h is $0.001/s. The node was created 4 s into provisioning and the run ended
    (done) at 30 s: provisioning bills 6 s, run 20 s, done nothing."""
    clock = PhaseClock()
    clock.replay([_transition("provisioning", 0), _transition("run", 10), _transition("done", 30)])
    since = (T0 + timedelta(seconds=4)).timestamp()
    until = (T0 + timedelta(seconds=500)).timestamp()
    cost = cost_by_phase(3.6, clock.spans(until), since)
    assert cost == pytest.approx({"provisioning": 0.006, "run": 0.02})


def test_the_ledger_upgrades_an_older_file_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with sqlite3.connect(path) as db:  # the schema before price and destroy-requested
        db.execute(
            "CREATE TABLE instances (entry INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT"
            " NULL, provider TEXT NOT NULL, pool TEXT, label TEXT NOT NULL, instance_id TEXT,"
            " intent_at REAL NOT NULL, created_at REAL, destroyed_at REAL)"
        )
        db.execute(
            "INSERT INTO instances (run_id, provider, label, intent_at) VALUES"
            " ('old', 'vastai', 'swjob:old', 1.0)"
        )
    ledger = Ledger(path)
    [old] = ledger.open_entries()
    assert (old.run_id, old.price_per_hour, old.destroy_requested_at) == ("old", None, None)
    entry = ledger.record_intent("new", "vastai", "swjob:new")
    born = ledger.record_created(entry, "77", price_per_hour=0.5)
    ledger.record_destroy_requested(entry)
    [new] = ledger.entries_of("new")
    assert (new.instance_id, new.price_per_hour, new.created_at) == ("77", 0.5, born)
    assert new.destroy_requested_at is not None and new.destroyed_at is None


def test_the_container_credential_comes_from_pid_1_then_from_our_own_env(tmp_path: Path) -> None:
    environ = tmp_path / "environ"
    environ.write_bytes(b"PATH=/bin\0CONTAINER_ID=42\0CONTAINER_API_KEY=k-pid1\0")
    own = {"CONTAINER_ID": "7", "CONTAINER_API_KEY": "k-own"}
    assert container_credential(environ, own) == ("42", "k-pid1")
    environ.write_bytes(b"PATH=/bin\0")
    assert container_credential(environ, own) == ("7", "k-own")
    assert container_credential(tmp_path / "unreadable", {}) is None
    assert parse_environ(b"A=1\0B=x=y\0junk\0") == {"A": "1", "B": "x=y"}


def test_a_404_means_gone_unless_it_is_a_bad_key() -> None:
    assert VastApiError("x", status=404, code="no_such_instance").gone
    assert VastApiError("x", status=404).gone
    assert not VastApiError("x", status=404, code="auth_error").gone
    assert not VastApiError("x", status=500).gone
