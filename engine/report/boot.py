"""A node's boot, step by step: what run.json, `swjob run` and the console show.

Provisioning is where a rented node costs the user most waiting: the offer search, the
create call, the provider pulling the image, the container starting, our on-start
command installing the agent, the agent dialling in. The providers and the agent mark
each step as it is reached (Boot events, durable in events.jsonl); this module turns
those marks into durations, one rule for every screen:

- the boot's clock starts when the provider took a slot of its pool (a run may wait in
  PENDING for one: that is queueing, not booting), else when the run entered provisioning;
- a step took from the previous step reached (the first: from the clock's start) to its
  own mark, or from its own `since` when it was timed on its own (the agent install,
  measured on the node);
- a step never reached is `None` — "not seen", never 0 s: the local pool has no image
  to load;
- a step no status poll saw, though a later one proves it happened (a container that ran
  had its image; an agent that joined ran in its container), is done but `inferred`: no
  time of its own, and the step after it counts from the last step seen;
- a boot begins at its slot: a run that moved to another pool (engine/run/fallover.py), or
  rented again, shows the boot of the node it got, not the steps of one it left;
- the total runs from the clock's start to the agent joining.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from engine.report.events import Boot, BootPhase, Transition

LABELS = {
    BootPhase.WARM_REUSED: "warm node reused",
    BootPhase.OFFER_CHOSEN: "offer chosen",
    BootPhase.INSTANCE_CREATED: "instance created",
    BootPhase.IMAGE_LOADING: "image loading",
    BootPhase.CONTAINER_RUNNING: "container running",
    BootPhase.AGENT_INSTALLED: "agent installed",
    BootPhase.AGENT_JOINED: "agent joined",
    BootPhase.PREFLIGHT: "pre-flight",
}
PROVISIONING = "provisioning"
STEPS = [phase for phase in BootPhase if phase in LABELS and phase is not BootPhase.WARM_REUSED]
"""A new node's steps; a run that took a warm node has one step before them instead
(engine/run/warm.py), and none of them but the join."""


@dataclass(frozen=True)
class BootStep:
    phase: BootPhase
    at: datetime | None  # when it was reached; None: not seen
    seconds: float | None  # how long reaching it took; None: not seen (or inferred)
    detail: str | None = None
    inferred: bool = False  # done, though no look saw it: a later step proves it

    @property
    def label(self) -> str:
        return LABELS[self.phase]

    @property
    def took(self) -> str:
        """How long it took, as the CLI prints it; an inferred step has no time of its own."""
        return "inferred" if self.inferred else took(self.seconds)


@dataclass(frozen=True)
class BootTimeline:
    steps: list[BootStep]  # every step, in order
    total_s: float | None  # the clock's start → agent joined; None until it joined

    @property
    def seen(self) -> list[BootStep]:
        return [s for s in self.steps if s.at is not None]

    @property
    def not_seen(self) -> list[BootStep]:
        """Steps missing before the last one reached (later ones may still come)."""
        seen = self.seen
        if not seen or seen[0].phase is BootPhase.WARM_REUSED:  # a kept node has no boot
            return []
        last = max(STEPS.index(s.phase) for s in seen)
        return [s for s in self.steps if STEPS.index(s.phase) < last and s.at is None]

    def step(self, phase: BootPhase) -> BootStep:
        return next(s for s in self.steps if s.phase is phase)

    def summary(self) -> dict[str, object]:
        """run.json's `boot`: each step with its time and duration (null: not seen)."""
        return {
            "steps": [
                {
                    "phase": s.phase.value,
                    "at": s.at.isoformat() if s.at else None,
                    "seconds": None if s.seconds is None else round(s.seconds, 3),
                    "detail": s.detail,
                    "inferred": s.inferred,
                }
                for s in self.steps
            ],
            "total_s": None if self.total_s is None else round(self.total_s, 3),
        }


def took(seconds: float | None) -> str:
    """A step's time as the CLI prints it: `0.4 s`, `36.0 s`, `4 m 05 s`; `not seen`."""
    if seconds is None:
        return "not seen"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} m {secs:02d} s"


def provisioning_start(timeline: Iterable[Transition]) -> datetime | None:
    """When the run (first) entered provisioning: where the boot's clock starts."""
    return next((t.ts for t in timeline if t.to_phase == PROVISIONING), None)


def current_boot(marks: Iterable[Boot]) -> list[Boot]:
    """The marks of the boot under way or done: from the last slot taken on (an earlier
    slot's boot was of a pool or node the run left)."""
    marks = list(marks)
    slots = [i for i, m in enumerate(marks) if m.phase is BootPhase.SLOT_TAKEN]
    return marks[slots[-1] :] if slots else marks


def boot_timeline(start: datetime | None, marks: Iterable[Boot]) -> BootTimeline:
    """The steps from the marks a run's datastream holds, `start` being when the run entered
    provisioning (a phase marked twice — an offer rented away under us, then the next one
    chosen — counts at its last mark)."""
    latest: dict[BootPhase, Boot] = {}
    for mark in current_boot(marks):
        latest[mark.phase] = mark
    slot = latest.get(BootPhase.SLOT_TAKEN)
    start = slot.at if slot else start
    steps: list[BootStep] = []
    previous = start
    warm = BootPhase.WARM_REUSED in latest
    for phase in [BootPhase.WARM_REUSED, *STEPS] if warm else STEPS:
        mark = latest.get(phase)
        if mark is None:
            steps.append(BootStep(phase, None, None))
            continue
        if mark.inferred:  # done by then, but when: unknown; the next counts from `previous`
            steps.append(BootStep(phase, mark.at, None, mark.detail, inferred=True))
            continue
        began = mark.since or previous
        seconds = max(0.0, (mark.at - began).total_seconds()) if began else None
        steps.append(BootStep(phase, mark.at, seconds, mark.detail))
        previous = mark.at
    joined = latest.get(BootPhase.AGENT_JOINED)
    total = (joined.at - start).total_seconds() if joined and start else None
    return BootTimeline(steps, None if total is None else max(0.0, total))
