"""Fold a run's datastream into its RunView.

One reducer serves live runs and history alike: the live view is the fold of the
events published so far, a historical view the fold of its `events.jsonl`. So what
the board shows for a finished run is exactly what it showed while it ran.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.report import events as ev
from engine.report.gpu import fold_gpus
from engine.report.views import NodeView, RunView


def new_view(event: ev.Submitted) -> RunView:
    return RunView(
        run_id=event.run_id,
        job_name=event.job_name,
        pool=event.pool,
        state="PENDING",
        phase="new",
        created=event.ts,
        updated=event.ts,
        run_dir=Path(event.run_dir),
        attempt=event.attempt,
        attempts=event.attempts,
        previous_run=event.previous_run,
        first_run=event.first_run,
        label=event.label,
        sweep=event.sweep,
        sink=event.sink,
    )


def _node(view: RunView, event: ev.Node) -> NodeView:
    old = view.node
    keep_since = old is not None and old.node_id == event.node_id and old.state == event.state
    return NodeView(
        provider=event.provider,
        node_id=event.node_id,
        pool=view.pool,
        run_id=view.run_id,
        state=event.state,
        facts=event.facts or (old.facts if old else None),
        price_per_hour=event.price_per_hour
        if event.price_per_hour is not None
        else (old.price_per_hour if old else None),
        offer=event.offer or (old.offer if old else None),
        since=old.since if keep_since and old else event.ts,
    )


def apply(view: RunView, event: ev.Event) -> RunView:
    """The view after one more event (views are immutable; this returns a new one)."""
    changes: dict[str, Any] = {"updated": event.ts}
    match event:
        case ev.Transition():
            changes |= {
                "state": event.to_state,
                "phase": event.to_phase,
                "timeline": [*view.timeline, event],
            }
            if event.reason:
                changes["reason"] = event.reason
        case ev.GpuMetrics():
            changes["gpus"] = fold_gpus(view.gpus, event)
        case ev.TransferProgress():
            changes["transfers"] = {**view.transfers, event.direction.value: event}
        case ev.Node():
            changes["node"] = _node(view, event)
            if event.state == ev.NodeState.GONE:  # a teardown left unconfirmed, settled by gc:
                changes["alerts"] = []  # its "may still be billing" no longer holds
        case ev.Boot():
            changes["boot"] = [*view.boot, event]
        case ev.PoolPassed():
            passed = {"pool": event.pool, "reason": event.reason}
            changes["pools_passed"] = [*view.pools_passed, passed]
            if event.next_pool is not None:  # the pool that serves it now
                changes["pool"] = event.next_pool
        case ev.Alert():
            changes["all_alerts"] = [*view.all_alerts, event.message]
            if event.persistent:
                changes["alerts"] = [*view.alerts, event.message]
        case ev.Cost():
            changes |= {"cost_dollars": event.dollars, "cost_by_phase": event.by_phase}
        case ev.OutputsSynced():
            changes["last_sync"] = event
        case ev.Finished():
            changes |= {
                "state": event.state,
                "exit_code": event.exit_code,
                "reason": event.reason,
                "missing_outputs": event.missing_outputs,
                "outputs_note": event.outputs_note,
                "finished": event.ts,
            }
    return view.model_copy(update=changes)


def fold(events: list[ev.Event]) -> RunView | None:
    """The view of a whole event log, or None when it does not start with Submitted."""
    if not events or not isinstance(events[0], ev.Submitted):
        return None
    view = new_view(events[0])
    for event in events[1:]:
        view = apply(view, event)
    return view
