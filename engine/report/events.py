"""The datastream's typed events: what the engine tells the world about a run.

Every event carries the run id, a per-run sequence number and a UTC timestamp; the
`kind` field discriminates the payload. Events are appended to the run's
`events.jsonl` and fanned out to subscribers (TUI, CLI). They never carry secrets:
log text is redacted before it becomes an event.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from agent.protocol import GpuSample, LogLine, NodeFacts, Step
from engine.report import logbudget


def utcnow() -> datetime:
    return datetime.now(UTC)


class NodeState(StrEnum):
    PROVISIONING = "provisioning"
    READY = "ready"
    BUSY = "busy"
    TEARING_DOWN = "tearing_down"
    GONE = "gone"
    UNCONFIRMED = "unconfirmed"  # teardown could not be confirmed: it may still be billing
    WARM = "warm"  # kept after its run for the pool's next one (keep_warm_s): still billing


class BootPhase(StrEnum):
    """The steps of a node's boot, in the order they happen. A provider reports those it
    really has (the local pool: no offer, no image, no install)."""

    SLOT_TAKEN = "slot_taken"  # not a step: the boot's clock starts once the pool has room
    WARM_REUSED = "warm_reused"  # a kept node took the run: no offer, image or install
    OFFER_CHOSEN = "offer_chosen"
    INSTANCE_CREATED = "instance_created"
    IMAGE_LOADING = "image_loading"  # the provider says it is pulling the image
    CONTAINER_RUNNING = "container_running"
    AGENT_INSTALLED = "agent_installed"  # the on-start command's install, as the node reports it
    AGENT_JOINED = "agent_joined"
    PREFLIGHT = "preflight"  # the host pre-flight's verdict (engine/run/preflight.py)


class TransferDirection(StrEnum):
    PUSH = "push"
    PULL = "pull"


class _Ev(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    seq: int = 0
    ts: datetime = Field(default_factory=utcnow)


class Submitted(_Ev):
    kind: Literal["submitted"] = "submitted"
    job_name: str
    pool: str
    run_dir: str
    attempt: int = 1  # of `attempts`: runs of one job chained after preemption/node loss
    attempts: int = 1
    previous_run: str | None = None
    first_run: str | None = None  # the chain's attempt 1 (None: this run is attempt 1)
    label: str | None = None  # the run's name when it is one variant of many: `job[LR=0.1]`
    sweep: str | None = None  # the sweep it belongs to (engine/sweep/)
    sink: str | None = None  # where the node puts the outputs: s3://bucket/prefix/job/run


class Transition(_Ev):
    """One FSM step: the observed event (spec vocabulary), the state change, the commands."""

    kind: Literal["transition"] = "transition"
    cause: str
    from_state: str | None
    to_state: str
    from_phase: str
    to_phase: str
    commands: list[str] = []
    reason: str | None = None
    exit_code: int | None = None  # the run step's exit code once known (recovery reads it)


class Log(_Ev):
    kind: Literal["log"] = "log"
    step: Step
    lines: list[LogLine]
    node_seq: int | None = None  # the agent's sequence number: where a replay resumes

    @model_validator(mode="before")
    @classmethod
    def _unpack(cls, data: object) -> object:
        """events.jsonl may hold a flood's lines packed (engine/report/logbudget.py)."""
        return logbudget.unpack(data)


class GpuMetrics(_Ev):
    """Every GPU of the node at node time `t` (unix s), sampled while a step runs."""

    kind: Literal["gpu"] = "gpu"
    t: float
    gpus: list[GpuSample]
    node_seq: int | None = None  # the agent's sequence number: where a replay resumes


class TransferProgress(_Ev):
    kind: Literal["transfer"] = "transfer"
    direction: TransferDirection
    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    current: str | None = None
    rate_bps: float = 0.0
    eta_s: float | None = None
    done: bool = False


class Node(_Ev):
    """The run's node changed: provisioned, joined (with facts), busy, tearing down, gone."""

    kind: Literal["node"] = "node"
    provider: str
    node_id: str
    state: NodeState
    facts: NodeFacts | None = None
    price_per_hour: float | None = None
    offer: dict[str, str | float | int | None] | None = None


class Boot(_Ev):
    """The node's boot reached `phase` at `at`. `since`: when the step that led here began,
    when it is known on its own (the agent install, timed on the node); otherwise the
    step began where the previous one ended (engine/report/boot.py). `inferred`: no look
    saw it, a later step proves it happened (engine/run/bootmarks.py), no later than `at`."""

    kind: Literal["boot"] = "boot"
    phase: BootPhase
    at: datetime
    since: datetime | None = None
    detail: str | None = None
    inferred: bool = False


class PoolPassed(_Ev):
    """The run's pool had nothing left for it while it provisioned (engine/run/fallover.py):
    `reason` in one line; the run moved to `next_pool`, or None: no pool was left."""

    kind: Literal["pool_passed"] = "pool_passed"
    pool: str
    reason: str
    next_pool: str | None = None


class Alert(_Ev):
    """Something the operator must see; `persistent` ones (a leaked node) stay on the board."""

    kind: Literal["alert"] = "alert"
    message: str
    persistent: bool = False
    orphan: str | None = None  # set on the start-up check's warnings: the node, described
    collectable: bool = True  # that node is ours to collect here (engine/providers/gc.py)


class Cost(_Ev):
    kind: Literal["cost"] = "cost"
    dollars: float
    by_phase: dict[str, float] = {}


class OutputsSynced(_Ev):
    """A live sync landed changed outputs (verified) in the run's landing dir while `run`
    ran; `paths` are this sync's files (redacted, at most SYNC_PATHS_SHOWN)."""

    kind: Literal["synced"] = "synced"
    files: int
    bytes: int
    paths: list[str] = []
    held: int = 0  # files the syncs have landed so far (each at its newest version)
    syncs: int = 1  # syncs that landed something, this one included
    sink: bool = False  # the node put them in the pool's sink (docs/sink.md), not here


SYNC_PATHS_SHOWN = 20


class Finished(_Ev):
    kind: Literal["finished"] = "finished"
    state: str
    exit_code: int | None = None
    reason: str | None = None
    missing_outputs: list[str] = []
    outputs_note: str | None = None  # why outputs were not collected (or landed without a
    # manifest: which landed whole), verdict aside


Event = Annotated[
    Submitted
    | Transition
    | Log
    | GpuMetrics
    | TransferProgress
    | Node
    | Boot
    | PoolPassed
    | Alert
    | Cost
    | OutputsSynced
    | Finished,
    Field(discriminator="kind"),
]
EVENT = TypeAdapter(Event)


def parse_event(line: str | bytes) -> Event:
    return EVENT.validate_json(line)
