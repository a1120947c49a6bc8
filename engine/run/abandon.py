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
from functools import partial
from pathlib import Path

from engine.report import appender
from engine.report import events as ev
from engine.report.datastream import Datastream, read_events
from engine.report.runbook import fold
from engine.report.views import RunView
from engine.run.runrecord import PhaseClock, write_run_json
from engine.state import ownership
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
        self._leases[run_id] = lease
        return True

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


async def mark_abandoned(store: Store, run_id: str, reason: str = REASON) -> str | None:
    """Record the end of an unfinished run whose node gc destroyed (caller holds its lease):
    its events first, then its index row and run.json, in that order and all on the
    writer thread (engine/report/appender.py), so a slow disk or another process holding
    runs.sqlite never holds up the caller's loop. Returns what could not be recorded."""
    found = store.unfinished_run(run_id)
    if found is None:
        return None
    view, _ = found
    path = view.run_dir / "events.jsonl"
    events = await asyncio.to_thread(read_events, path)
    before = fold(events) or view
    stream = Datastream()
    stream.open_run(run_id, path)
    ended = [
        stream.publish(event)
        for event in (
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
    ]
    await stream.close_run(run_id)
    stream.close()
    after = fold([*events, *ended]) or view
    assert after.terminal, ended
    failed: list[str] = []
    appender.later(partial(_record_end, store.path, after, failed))
    await appender.written()
    return "; ".join(failed) or None


def _record_end(index: Path, view: RunView, failed: list[str]) -> None:
    """On the writer thread: the run's row (through a store opened, used and closed here)
    and its run.json; what fails is added to `failed`."""
    try:
        writes = Store(index)
        try:
            writes.save(view)
        finally:
            writes.close()
    except StateNotWritten as exc:
        failed.append(f"run {view.run_id} not marked FAILED in the run index: {exc}")
    clock = PhaseClock()  # the phases were timed by the dead owner; only the end is ours
    clock.enter("done")
    try:
        write_run_json(view, clock, {"job_file": None})
    except OSError as exc:
        failed.append(f"run.json of run {view.run_id} not written: {exc}")
