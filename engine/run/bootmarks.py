"""A run's boot steps, published: those its provider reports as it provisions and watches
the node come up, and those the node's first join tells — its agent install (timed on
the node) and the join itself.

The on-start command times the install with the node's clock; the agent sends those
times with the node's clock at sending (agent/protocol.py BootReport). Shifting them by
the difference between that and our clock when the hello arrived puts them on our
clock, so a node whose clock is off by minutes still shows the install where it
happened (to within the hello's transit, milliseconds).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agent.protocol import BootReport
from engine.jobs.pools import RENTED
from engine.report import events as ev
from engine.report.boot import current_boot

if TYPE_CHECKING:
    from engine.run.orchestrator import RunDriver

DETAIL_MAX = 200
FAILED = "failed"
"""How a failed pre-flight's mark detail starts: the next node's boot begins anew after it."""


class BootMarks:
    """Publishes a run's boot steps: those its provider reports (through the run's work
    context, engine/report/scope.py) and those its node's first join tells."""

    def __init__(self, driver: RunDriver) -> None:
        self._driver = driver

    @property
    def over(self) -> bool:
        """The node joined once: its boot is over (a rejoin, or an adopting engine's fresh
        look at the instance, adds no boot step)."""
        return any(m.phase is ev.BootPhase.AGENT_JOINED for m in self._marks())

    @property
    def checked(self) -> bool:
        """The node booting now passed its host pre-flight (engine/run/preflight.py): a
        mark says so. An engine that adopted the run after that must not check it again:
        its workspace may be on it already."""
        return any(m.phase is ev.BootPhase.PREFLIGHT for m in self._marks())

    def _marks(self) -> list[ev.Boot]:
        """The marks of the node booting now: from the last slot taken on (a pool the run
        left, engine/run/fallover.py), after the last node that failed its pre-flight
        (engine/run/preflight.py; the next offer's node boots step by step)."""
        marks = current_boot(self._driver.view.boot)
        failed = [
            i
            for i, m in enumerate(marks)
            if m.phase is ev.BootPhase.PREFLIGHT and (m.detail or "").startswith(FAILED)
        ]
        return marks[failed[-1] + 1 :] if failed else marks

    def reached(self, phase: ev.BootPhase, detail: str | None) -> None:
        """A step the provider saw; its detail (an offer, Vast's status message) is foreign
        text: redacted and bounded like a reason."""
        if self.over or self._seen_before(phase):
            return
        shown = self._driver.redact(detail)[:DETAIL_MAX] if detail else None
        run_id = self._driver.view.run_id
        self._driver.publish(ev.Boot(run_id=run_id, phase=phase, at=ev.utcnow(), detail=shown))

    def _seen_before(self, phase: ev.BootPhase) -> bool:
        """A step keeps its first mark: an engine that adopts a booting run looks at the
        instance afresh and would see "running" again, later. Only the offer may be chosen
        again (the first was rented away under us): the one rented counts."""
        if phase is ev.BootPhase.OFFER_CHOSEN:
            return False
        return any(m.phase is phase for m in self._marks())

    def joined(self, report: BootReport | None) -> None:
        """The node joined: the first time, its install and the join end the boot, after
        the container steps no status look saw (a rented node's: see `inferred_marks`)."""
        if not self.over:
            marks = join_marks(self._driver.view.run_id, report, ev.utcnow())
            if self._driver.pool.provider in RENTED:
                marks = [*inferred_marks(self._marks(), marks[0]), *marks]
            for mark in marks:
                self._driver.publish(mark)


IMPLIED = (  # (step, what proves it), latest first: each proves the one before it
    (ev.BootPhase.CONTAINER_RUNNING, "its agent ran in it"),
    (ev.BootPhase.IMAGE_LOADING, "its container ran"),
)


def inferred_marks(seen: list[ev.Boot], first_join_mark: ev.Boot) -> list[ev.Boot]:
    """The container steps of a rented node's boot that no status look saw, though its
    agent's join proves them: the container ran (no later than the agent install began),
    so its image was loaded. A provider polls its listing every few seconds; a pod or
    instance that comes up between two looks, or just before the agent joins, is not
    seen running. Marked done and `inferred`, never "not seen"; a node kept warm, or one
    not created (nothing but a join), infers nothing."""
    phases = {m.phase for m in seen}
    if ev.BootPhase.INSTANCE_CREATED not in phases or ev.BootPhase.WARM_REUSED in phases:
        return []
    bound = first_join_mark.since or first_join_mark.at
    marks: list[ev.Boot] = []
    for phase, proof in IMPLIED:
        seen_at = next((m.at for m in seen if m.phase is phase), None)
        if seen_at is not None:
            bound = seen_at
            continue
        said = f"not seen by the provider's status looks: {proof}"
        run_id = first_join_mark.run_id
        marks.insert(0, ev.Boot(run_id=run_id, phase=phase, at=bound, detail=said, inferred=True))
    return marks


def join_marks(run_id: str, report: BootReport | None, received: datetime) -> list[ev.Boot]:
    """The marks a first join adds: the install (when the node timed one) and the join."""
    marks = []
    install = _install_span(report, received)
    if install is not None:
        started, ended = install
        marks.append(
            ev.Boot(run_id=run_id, phase=ev.BootPhase.AGENT_INSTALLED, at=ended, since=started)
        )
    marks.append(ev.Boot(run_id=run_id, phase=ev.BootPhase.AGENT_JOINED, at=received))
    return marks


def _install_span(
    report: BootReport | None, received: datetime
) -> tuple[datetime, datetime] | None:
    """(began, ended) on our clock, or None when the node's times do not make a span
    (nothing installed, or values no clock gives)."""
    if report is None or report.install_started is None or report.install_ended is None:
        return None
    times = (report.install_started, report.install_ended, report.sent_at)
    if not all(math.isfinite(t) and t > 0 for t in times):
        return None
    if not times[0] <= times[1] <= times[2]:
        return None
    offset = received.timestamp() - report.sent_at
    began, ended = (datetime.fromtimestamp(t + offset, UTC) for t in times[:2])
    return began, ended
