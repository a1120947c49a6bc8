"""The job lifecycle of spec §6 as a pure, table-driven state machine.

`step(state, event) -> Outcome` never performs I/O: the orchestrator runs the
commands it returns and feeds what it observes back in. The table below is the
spec's table, row by row, plus the guards for "no setup" and "no workspace" and
three observations the spec leaves implicit: a failed setup (SetupFailed), the
provider's confirmation that the node is gone (NodeTornDown), which ends the run, and an
adopter finding a run that was still queued for a node when its operator died
(QueuedRunAdopted), which asks for the node again.

Events that are not valid in a state change nothing and are reported as ignored,
never raised: a late heartbeat or a duplicate exit must not crash a run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"

    @property
    def terminal(self) -> bool:
        return self in (JobState.COMPLETED, JobState.FAILED)


class Phase(StrEnum):
    """Where inside a state the job is: what the UI shows as the current step."""

    NEW = "new"
    PROVISIONING = "provisioning"
    MATERIALIZING = "materializing"
    SETUP = "setup"
    RUN = "run"
    COLLECTING = "collecting"
    TEARDOWN = "teardown"
    DONE = "done"


# ---- events observed -------------------------------------------------------------------


@dataclass(frozen=True)
class JobSubmitted:
    has_setup: bool
    has_workspace: bool


@dataclass(frozen=True)
class NodeReady:
    pass


@dataclass(frozen=True)
class WorkspaceMaterialized:
    pass


@dataclass(frozen=True)
class SetupCompleted:
    pass


@dataclass(frozen=True)
class SetupFailed:
    code: int


@dataclass(frozen=True)
class JobExited:
    code: int


@dataclass(frozen=True)
class OutputsCollected:
    pass


@dataclass(frozen=True)
class NodeFault:
    reason: str


@dataclass(frozen=True)
class NodeLost:
    reason: str


@dataclass(frozen=True)
class NodePreempted(NodeLost):
    """The provider took the node back (an interruptible instance outbid or reclaimed):
    a node loss in every transition, but the run's reason says "preempted"."""


@dataclass(frozen=True)
class NodeGoing:
    """The node is going away while its agent still answers: its container restarted
    (the job's processes died with it), or its provider says, confirmed, that it died.
    What the node has is collected before it is torn down; `reason` is the run's reason."""

    reason: str


@dataclass(frozen=True)
class OperatorStop:
    reason: str = "stopped by operator"


@dataclass(frozen=True)
class NodeTornDown:
    pass


@dataclass(frozen=True)
class QueuedRunAdopted:
    """An engine adopted a run whose operator died while the run waited in PENDING for a
    slot of its pool: no node was ever asked for (no handle, no boot step, no trace at the
    provider), so nothing can be rejoined — and nothing leaks. The run is provisioned now,
    from the start, as its operator would have done once a slot freed."""


@dataclass(frozen=True)
class InternalError:
    """Carrying out a command raised something nobody expected: the run must still end."""

    reason: str


Event = (
    JobSubmitted
    | NodeReady
    | WorkspaceMaterialized
    | SetupCompleted
    | SetupFailed
    | JobExited
    | OutputsCollected
    | NodeFault
    | NodeLost
    | NodeGoing
    | OperatorStop
    | NodeTornDown
    | QueuedRunAdopted
    | InternalError
)

# ---- commands emitted ------------------------------------------------------------------


@dataclass(frozen=True)
class ProvisionNode:
    pass


@dataclass(frozen=True)
class MaterializeWorkspace:
    pass


@dataclass(frozen=True)
class RunSetup:
    pass


@dataclass(frozen=True)
class RunJob:
    pass


@dataclass(frozen=True)
class CollectOutputs:
    best_effort: bool = False


@dataclass(frozen=True)
class TeardownNode:
    pass


Command = ProvisionNode | MaterializeWorkspace | RunSetup | RunJob | CollectOutputs | TeardownNode


# ---- state -----------------------------------------------------------------------------


@dataclass(frozen=True)
class FsmState:
    state: JobState | None = None
    phase: Phase = Phase.NEW
    has_setup: bool = False
    has_workspace: bool = False
    exit_code: int | None = None
    reason: str | None = None

    @property
    def finished(self) -> bool:
        return self.phase is Phase.DONE


@dataclass(frozen=True)
class Outcome:
    state: FsmState
    commands: tuple[Command, ...] = ()
    ignored: bool = False

    @property
    def transitioned(self) -> bool:
        return not self.ignored


Guard = Callable[[FsmState, Event], bool]


def _always(_s: FsmState, _e: Event) -> bool:
    return True


def _workspace(s: FsmState, _e: Event) -> bool:
    return s.has_workspace


def _no_ws_setup(s: FsmState, _e: Event) -> bool:
    return not s.has_workspace and s.has_setup


def _no_ws_no_setup(s: FsmState, _e: Event) -> bool:
    return not s.has_workspace and not s.has_setup


def _setup(s: FsmState, _e: Event) -> bool:
    return s.has_setup


def _no_setup(s: FsmState, _e: Event) -> bool:
    return not s.has_setup


def _exit_zero(_s: FsmState, e: Event) -> bool:
    return isinstance(e, JobExited) and e.code == 0


def _exit_nonzero(_s: FsmState, e: Event) -> bool:
    return isinstance(e, JobExited) and e.code != 0


@dataclass(frozen=True)
class Row:
    """One line of the lifecycle table: in (state, phase) on event (if guard) → commands, target."""

    source: tuple[JobState | None, Phase]
    event: type
    commands: tuple[Command, ...]
    target: tuple[JobState, Phase]
    guard: Guard = field(default=_always)


P, R = JobState.PENDING, JobState.RUNNING
C, F = JobState.COMPLETED, JobState.FAILED
NEW, PROV, MAT = Phase.NEW, Phase.PROVISIONING, Phase.MATERIALIZING
SETUP, RUN, COLL, TEAR, DONE = Phase.SETUP, Phase.RUN, Phase.COLLECTING, Phase.TEARDOWN, Phase.DONE

ACTIVE: tuple[tuple[JobState, Phase], ...] = (
    (P, PROV),
    (R, MAT),
    (R, SETUP),
    (R, RUN),
)
"""Where a fault, a loss or a stop fails the run. Collecting after exit 0 is active too, but
there the exit code has decided (spec §6): see the (R, COLL) rows."""

TABLE: tuple[Row, ...] = (
    Row((None, NEW), JobSubmitted, (ProvisionNode(),), (P, PROV)),
    # its operator died while the run waited for a slot: the adopter asks for the node
    Row((P, PROV), QueuedRunAdopted, (ProvisionNode(),), (P, PROV)),
    Row((P, PROV), NodeReady, (MaterializeWorkspace(),), (R, MAT), _workspace),
    Row((P, PROV), NodeReady, (RunSetup(),), (R, SETUP), _no_ws_setup),
    Row((P, PROV), NodeReady, (RunJob(),), (R, RUN), _no_ws_no_setup),
    Row((R, MAT), WorkspaceMaterialized, (RunSetup(),), (R, SETUP), _setup),
    Row((R, MAT), WorkspaceMaterialized, (RunJob(),), (R, RUN), _no_setup),
    Row((R, SETUP), SetupCompleted, (RunJob(),), (R, RUN)),
    Row((R, SETUP), SetupFailed, (TeardownNode(),), (F, TEAR)),
    Row((R, RUN), JobExited, (CollectOutputs(),), (R, COLL), _exit_zero),
    Row(
        (R, RUN),
        JobExited,
        (CollectOutputs(best_effort=True), TeardownNode()),
        (F, COLL),
        _exit_nonzero,
    ),
    Row((R, COLL), OutputsCollected, (TeardownNode(),), (C, TEAR)),
    # best-effort collection after a failed run finishes; teardown was already ordered
    Row((F, COLL), OutputsCollected, (), (F, TEAR)),
    Row((F, COLL), NodeFault, (), (F, TEAR)),
    Row((F, COLL), NodeLost, (), (F, TEAR)),
    # a stop (operator, cap) cuts best-effort collection short; a command that raised
    # abandoned the rest of its list: either way teardown is ordered (again — it runs once:
    # the later teardown cancels the earlier task). The run keeps its verdict and reason.
    Row((F, COLL), OperatorStop, (TeardownNode(),), (F, TEAR)),
    Row((F, COLL), InternalError, (TeardownNode(),), (F, TEAR)),
    # the node goes while its agent answers: a step's files are pulled first (a restarted
    # container kept its disk); before any step there is nothing to pull
    *(
        Row(src, NodeGoing, (CollectOutputs(best_effort=True), TeardownNode()), (F, COLL))
        for src in ((R, SETUP), (R, RUN))
    ),
    *(Row(src, NodeGoing, (TeardownNode(),), (F, TEAR)) for src in ((P, PROV), (R, MAT))),
    # faults, loss, internal errors and the operator's stop end any active step
    *(
        Row(src, ev, (TeardownNode(),), (F, TEAR))
        for src in ACTIVE
        for ev in (NodeFault, NodeLost, OperatorStop, InternalError)
    ),
    # collecting after exit 0: the exit code decided COMPLETED. A stop (operator, cap) or
    # the node's loss cuts collection short — what did not land is recorded with the
    # reason — and keeps the verdict; a collection that failed or raised fails the run.
    Row((R, COLL), OperatorStop, (TeardownNode(),), (C, TEAR)),
    Row((R, COLL), NodeLost, (TeardownNode(),), (C, TEAR)),
    Row((R, COLL), NodeFault, (TeardownNode(),), (F, TEAR)),
    Row((R, COLL), InternalError, (TeardownNode(),), (F, TEAR)),
    # the teardown itself broke past its retries (and said so in an alert): never hang
    *(Row((st, TEAR), InternalError, (), (st, DONE)) for st in (C, F)),
    # the provider confirms the node is gone: the run is over
    *(Row((st, ph), NodeTornDown, (), (st, DONE)) for st in (C, F) for ph in (COLL, TEAR)),
)


def reason_of(event: Event) -> str | None:
    """The one line a run that this event fails gives as its reason."""
    match event:
        case SetupFailed(code):
            return f"setup failed with code {code}"
        case JobExited(code) if code != 0:
            return f"run exited with code {code}"
        case NodePreempted(reason):
            return f"preempted: {reason}"
        case NodeLost(reason):
            return f"node lost: {reason}"
        case NodeFault(reason) | NodeGoing(reason) | OperatorStop(reason) | InternalError(reason):
            return reason
    return None


def step(state: FsmState, event: Event) -> Outcome:
    """Apply one observed event. Pure: same input, same output, no side effects."""
    for row in TABLE:
        if row.source != (state.state, state.phase) or not isinstance(event, row.event):
            continue
        if not row.guard(state, event):
            continue
        new = replace(state, state=row.target[0], phase=row.target[1])
        if isinstance(event, JobSubmitted):
            new = replace(new, has_setup=event.has_setup, has_workspace=event.has_workspace)
        if isinstance(event, JobExited):
            new = replace(new, exit_code=event.code)
        if new.reason is None and row.target[0] is F:
            new = replace(new, reason=reason_of(event))
        return Outcome(new, row.commands)
    return Outcome(state, (), ignored=True)


def name(obj: object) -> str:
    """The spec's vocabulary for an event or command: its class name."""
    return type(obj).__name__
