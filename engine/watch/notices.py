"""What of a run's datastream is worth telling someone away from the screen, said once.

Pure: events in, notices out (engine/watch/notifier.py delivers them). Read from the
datastream, so a run started from the console, `swjob run` or the Python API is told
about alike. The text is masked by the caller with the run's own redaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from engine.jobs.pools import Caps
from engine.report import events as ev
from engine.report.views import RunView

CAP_WARN_AT = 0.8
"""The share of a cap at which the run's owner is warned, once, before it stops the run."""


@dataclass(frozen=True)
class Notice:
    run_id: str  # "" for the engine's own alerts
    pool: str | None
    kind: str  # ended, cap, idle, billing, attempt
    title: str
    body: str


@dataclass
class _Run:
    name: str
    pool: str
    started: datetime
    dollars: float = 0.0
    warned: set[str] = field(default_factory=set)  # the caps warned about


class Notices:
    """Turns a stream of events into notices: the run ended (state, reason, duration,
    cost, where its outputs are), a cap at 80 % and reached, the GPUs idle, a node that
    may still be billing, the next attempt after a preemption or a lost node."""

    def __init__(
        self, caps_of: Callable[[str], Caps | None], view_of: Callable[[str], RunView | None]
    ) -> None:
        self._caps_of = caps_of  # pool name → its caps
        self._view_of = view_of  # run id → its view (None: unknown here)
        self._runs: dict[str, _Run] = {}
        self._told: set[str] = set()  # told about: what a run says after is not news

    def see(self, event: ev.Event) -> list[Notice]:
        if event.run_id in self._told:
            return []
        run = self._runs.get(event.run_id)
        if run is None and event.run_id and not isinstance(event, ev.Submitted):
            run = self._adopted(event.run_id)
        match event:
            case ev.Submitted():
                return self._submitted(event)
            case ev.Cost() if run is not None:
                run.dollars = event.dollars
                return self._near_cap(event, run)
            case ev.Alert():
                return self._alert(event, run)
            case ev.Finished() if run is not None:
                del self._runs[event.run_id]
                self._told.add(event.run_id)
                return [self._ended(event, run)]
        return self._near_cap(event, run) if run is not None else []

    def _adopted(self, run_id: str) -> _Run | None:
        """A run this engine took over (its Submitted was published by another)."""
        view = self._view_of(run_id)
        if view is None:
            return None
        run = self._runs[run_id] = _Run(view.name, view.pool, view.created)
        return run

    def _submitted(self, event: ev.Submitted) -> list[Notice]:
        name = event.label or event.job_name
        self._runs[event.run_id] = _Run(name, event.pool, event.ts)
        if event.attempt == 1:
            return []
        title = f"swjob: {name}: attempt {event.attempt} of {event.attempts} started"
        body = f"run {event.run_id} follows run {event.previous_run} on pool {event.pool}"
        return [Notice(event.run_id, event.pool, "attempt", title, body)]

    def _near_cap(self, event: ev.Event, run: _Run) -> list[Notice]:
        caps = self._caps_of(run.pool)
        if caps is None:
            return []
        hours = (event.ts - run.started).total_seconds() / 3600
        near = []
        if caps.max_dollars is not None and run.dollars >= CAP_WARN_AT * caps.max_dollars:
            near.append(("max_dollars", f"${run.dollars:.2f} of ${caps.max_dollars:g} spent"))
        if caps.max_hours is not None and hours >= CAP_WARN_AT * caps.max_hours:
            near.append(("max_hours", f"{hours:.2f} h of {caps.max_hours:g} h run"))
        notices = []
        for cap, said in near:
            if cap not in run.warned:
                run.warned.add(cap)
                title = f"swjob: {run.name}: {CAP_WARN_AT:.0%} of its {cap} cap"
                body = f"run {event.run_id}: {said}; it is stopped at the cap"
                notices.append(Notice(event.run_id, run.pool, "cap", title, body))
        return notices

    def _alert(self, event: ev.Alert, run: _Run | None) -> list[Notice]:
        pool = run.pool if run else None
        name = run.name if run else "swjob"
        if "may still be billing" in event.message:
            kind, title = "billing", f"swjob: {name}: a node may still be billing"
        elif event.message.startswith("GPUs idle"):
            kind, title = "idle", f"swjob: {name}: GPUs idle"
        else:
            return []
        where = f"run {event.run_id}: " if event.run_id else ""
        return [Notice(event.run_id, pool, kind, title, where + event.message)]

    def _ended(self, event: ev.Finished, run: _Run) -> Notice:
        view = self._view_of(event.run_id)
        ended = f"stopped: {event.reason}" if _capped(event) else event.state
        if event.reason and not _capped(event):
            ended += f": {event.reason}"  # node lost, preempted, GPU idle…
        title = f"swjob: {run.name} {ended}"
        lines = [f"run {event.run_id} on pool {run.pool}: {event.state}"]
        if event.reason:
            lines.append(f"reason: {event.reason}")
        lines.append(f"took {_duration((event.ts - run.started).total_seconds())}")
        dollars = view.cost_dollars if view is not None else None
        if dollars is not None or run.dollars:
            lines.append(f"cost ${dollars if dollars is not None else run.dollars:.2f}")
        if view is not None:
            lines.append(f"outputs: {_outputs(view)}")
        return Notice(event.run_id, run.pool, "ended", title, "\n".join(lines))


def _capped(event: ev.Finished) -> bool:
    return (event.reason or "").startswith("cap reached")


def _outputs(view: RunView) -> str:
    places = [str(view.run_dir / "outputs")]
    if view.sink:
        places.append(view.sink)
    return " and ".join(places)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"
