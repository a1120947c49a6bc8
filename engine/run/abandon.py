"""Ending runs nobody will carry on: `swjob gc` destroyed their nodes.

A run whose owner died stays unfinished until an adopter takes it over
(engine/state/ownership.py). When gc destroys its node instead, the run must end too —
FAILED, "abandoned: destroyed by gc" (or, when gc finds its node already gone — its
dead owner's destroy, or an earlier gc's, that Vast took a while to settle —
"abandoned: its node is gone, found by gc") — everywhere a reader looks: the store (`swjob
runs`, the board), events.jsonl (`swjob attach`, the timeline) and run.json. The
run's lease is taken before its node is destroyed and held until the run is closed,
so no adopter can race gc; a run adopted in the meantime is left out.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from functools import partial
from pathlib import Path

from engine.errors import one_line
from engine.report import appender
from engine.report import events as ev
from engine.report.datastream import Datastream, read_events
from engine.report.runbook import fold
from engine.report.views import RunView
from engine.run import nodeend
from engine.run.runrecord import PhaseClock, write_run_json, write_summary
from engine.state import ownership
from engine.state.ledger import Ledger, LedgerEntry
from engine.state.locked import StateNotWritten
from engine.state.store import Store

REASON = "abandoned: destroyed by gc"
GONE_REASON = "abandoned: its node is gone, found by gc"


class Claims:
    """Leases on abandoned runs whose nodes are about to be destroyed (gc.RunClaims)."""

    def __init__(self, store: Store) -> None:
        """`store` is read on the caller's thread; the run's end is written by a store of
        the writer thread's own."""
        self._store = store
        self._leases: dict[str, ownership.Lease] = {}

    def take(self, run_id: str) -> bool:
        """Take the run's lease; False when an engine adopted it since it was listed."""
        lease = ownership.acquire(run_id)
        if lease is None:
            return False
        found = self._store.unfinished_run(run_id)
        if found is not None and ownership.elsewhere(found[1].get(ownership.OWNER)):
            lease.release()  # its owner lives: its lock file was deleted under it
            return False
        self._leases[run_id] = lease
        return True

    async def node_gone(self, run_id: str, instance: str) -> str | None:
        """gc destroyed `instance`, the node of `run_id`, a run that has ended."""
        return await mark_node_gone(self._store, run_id, instance)

    async def settle(self, run_id: str, found_gone: bool = False) -> str | None:
        """The run's node is gone (destroyed by this gc, or `found_gone` already): close the
        run as FAILED and give its lease up. Returns what could not be recorded (one
        line), else None."""
        lease = self._leases.pop(run_id, None)
        if lease is None:
            return None
        try:
            reason = GONE_REASON if found_gone else REASON
            return await mark_abandoned(self._store, run_id, reason)
        finally:
            lease.release(finished=True)

    def release(self) -> None:
        """Give up leases whose node could not be destroyed (their runs stay adoptable)."""
        for lease in self._leases.values():
            lease.release()
        self._leases.clear()


def _ledger_rows(run_id: str) -> list[LedgerEntry]:
    """The run's ledger rows (its nodes' billing starts); none when the ledger cannot be
    read: the start its index row kept stands."""
    try:
        return Ledger().entries_of(run_id)
    except (StateNotWritten, sqlite3.Error, OSError):
        return []


async def mark_abandoned(store: Store, run_id: str, reason: str = REASON) -> str | None:
    """Record the end of an unfinished run whose node gc destroyed (caller holds its lease):
    its events first, then its index row and run.json, in that order and all on the
    writer thread (engine/report/appender.py), so a slow disk or another process holding
    runs.sqlite never holds up the caller's loop. Returns what could not be recorded."""
    found = store.unfinished_run(run_id)
    if found is None:
        return None
    view, saved = found
    events = await asyncio.to_thread(read_events, view.run_dir / "events.jsonl")
    rows = await asyncio.to_thread(_ledger_rows, run_id)
    before = fold(events) or view
    gone = reason == GONE_REASON
    closing = nodeend.closing_events(run_id, saved, events, found_gone=gone, rows=rows)
    after = await _appended(
        view,
        events,
        *closing,
        ev.Transition(
            run_id=run_id,
            cause="Abandoned",
            from_state=before.state if before.state != "PENDING" else None,
            to_state="FAILED",
            from_phase=before.phase or "new",
            to_phase="done",
            reason=reason,
        ),
        ev.Finished(run_id=run_id, state="FAILED", reason=reason),
    )
    assert after.terminal, after
    failed: list[str] = []
    appender.later(partial(_record_end, store.path, after, failed))
    await appender.written()
    return "; ".join(failed) or None


async def mark_node_gone(store: Store, run_id: str, instance: str) -> str | None:
    """Record that gc destroyed the node of an ended run whose teardown could not confirm
    it gone: the node is gone and the run's "may still be billing" alert is settled — on
    the board, in `swjob runs` and run.json, where it stayed after the node was collected.
    Returns what could not be recorded."""
    view = store.find(run_id)
    node = view.node if view is not None else None
    if view is None or view.finished is None or node is None or node.node_id != instance:
        return None
    if node.state != ev.NodeState.UNCONFIRMED:
        return None
    events = await asyncio.to_thread(read_events, view.run_dir / "events.jsonl")
    gone = ev.Node(run_id=run_id, provider=node.provider, node_id=instance, state=ev.NodeState.GONE)
    after = await _appended(view, events, gone)
    failed: list[str] = []
    appender.later(partial(_record_settled, store.path, after, failed))
    await appender.written()
    return "; ".join(failed) or None


async def _appended(view: RunView, events: list[ev.Event], *more: ev.Event) -> RunView:
    """Append `more` to the run's events.jsonl (after `events`, read from it): the view then."""
    stream = Datastream()
    stream.open_run(view.run_id, view.run_dir / "events.jsonl", events[-1].seq if events else 0)
    added = [stream.publish(event) for event in more]
    await stream.close_run(view.run_id)
    stream.close()
    return fold([*events, *added]) or view


def _record_end(index: Path, view: RunView, failed: list[str]) -> None:
    """On the writer thread: the run's row and its run.json; what fails is added to
    `failed`."""
    _save_row(index, view, failed, "marked FAILED")
    clock = PhaseClock()  # the phases were timed by the dead owner; only the end is ours
    clock.enter("done")
    try:
        write_run_json(view, clock, {"job_file": None, "cost_by_phase": view.cost_by_phase})
    except OSError as exc:
        failed.append(f"run.json of run {view.run_id} not written: {exc}")


def _record_settled(index: Path, view: RunView, failed: list[str]) -> None:
    """On the writer thread: the run's row, and its node and persistent alerts in its
    run.json (the rest of which, its owner's timing, stays as written)."""
    _save_row(index, view, failed, "told its node is gone")
    try:
        summary = json.loads((view.run_dir / "run.json").read_text(encoding="utf-8"))
        summary["node"] = view.node.model_dump(mode="json") if view.node else None
        summary["persistent_alerts"] = view.alerts
        write_summary(view.run_dir, summary)
    except (OSError, ValueError) as exc:
        failed.append(f"run.json of run {view.run_id} not written: {one_line(exc)}")


def _save_row(index: Path, view: RunView, failed: list[str], what: str) -> None:
    """The run's row, through a store opened, used and closed here."""
    try:
        writes = Store(index)
        try:
            writes.save(view)
        finally:
            writes.close()
    except StateNotWritten as exc:
        failed.append(f"run {view.run_id} not {what} in the run index: {exc}")
