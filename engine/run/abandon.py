"""Ending runs nobody will carry on: `swjob gc` destroyed their nodes.

A run whose owner died stays unfinished until an adopter takes it over
(engine/state/ownership.py). When gc destroys its node instead, the run must end too —
FAILED, "abandoned: destroyed by gc" — everywhere a reader looks: the store (`swjob
runs`, the board), events.jsonl (`swjob attach`, the timeline) and run.json. The
run's lease is taken before its node is destroyed and held until the run is closed,
so no adopter can race gc; a run adopted in the meantime is left out.
"""

from __future__ import annotations

from engine.report import events as ev
from engine.report.datastream import Datastream, read_events
from engine.report.runbook import fold
from engine.run.runrecord import PhaseClock, write_run_json
from engine.state import ownership
from engine.state.store import Store

REASON = "abandoned: destroyed by gc"


class Claims:
    """Leases on abandoned runs whose nodes are about to be destroyed (gc.RunClaims)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._leases: dict[str, ownership.Lease] = {}

    def take(self, run_id: str) -> bool:
        """Take the run's lease; False when an engine adopted it since it was listed."""
        lease = ownership.acquire(run_id)
        if lease is None:
            return False
        self._leases[run_id] = lease
        return True

    def settle(self, run_id: str) -> None:
        """The run's node is gone: close the run as FAILED and give its lease up."""
        lease = self._leases.pop(run_id, None)
        if lease is not None:
            mark_abandoned(self._store, run_id)
            lease.release(finished=True)

    def release(self) -> None:
        """Give up leases whose node could not be destroyed (their runs stay adoptable)."""
        for lease in self._leases.values():
            lease.release()
        self._leases.clear()


def mark_abandoned(store: Store, run_id: str) -> None:
    """Record the end of an unfinished run whose node gc destroyed (caller holds its lease)."""
    found = store.unfinished_run(run_id)
    if found is None:
        return
    view, _ = found
    path = view.run_dir / "events.jsonl"
    before = fold(read_events(path)) or view
    stream = Datastream()
    stream.open_run(run_id, path)
    try:
        ended = [
            ev.Transition(
                run_id=run_id,
                cause="Abandoned",
                from_state=before.state if before.state != "PENDING" else None,
                to_state="FAILED",
                from_phase=before.phase or "new",
                to_phase="done",
                reason=REASON,
            ),
            ev.Finished(run_id=run_id, state="FAILED", reason=REASON),
        ]
        events = [stream.publish(event) for event in ended]
    finally:
        stream.close()
    after = fold(read_events(path)) or view
    assert after.terminal, events
    store.save(after)
    clock = PhaseClock()  # the phases were timed by the dead owner; only the end is ours
    clock.enter("done")
    write_run_json(after, clock, {"job_file": None})
