"""Read-only views of runs and pools: what the engine's public API hands to the TUI and CLI.

Views are snapshots (plain pydantic models), rebuilt from the datastream, so a UI
never holds a reference into the engine's live state.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from agent.protocol import NodeFacts
from engine.report.events import Boot, NodeState, OutputsSynced, TransferProgress, Transition


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class NodeView(_View):
    provider: str
    node_id: str
    pool: str
    run_id: str | None
    state: NodeState
    facts: NodeFacts | None = None
    price_per_hour: float | None = None
    offer: dict[str, str | float | int | None] | None = None
    since: datetime


class GpuView(_View):
    """One GPU of a run's node: the latest sample, a window for sparklines, and running
    totals for run.json's summary (engine/report/gpu.py folds them)."""

    index: int
    util_recent: list[float] = []  # utilisation %, oldest first
    util_pct: float | None = None
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    samples: int = 0
    util_sum: float = 0.0
    util_peak: float = 0.0
    mem_sum_mb: float = 0.0
    mem_peak_mb: float = 0.0
    seconds: float = 0.0  # time covered by samples (GPU-hours = Σ seconds / 3600)
    last_t: float = 0.0  # node time of the latest sample


def short_id(run_id: str) -> str:
    """The random tail of a run id (`6e80cbe3` of `20261204-061502-6e80cbe3`): what the
    console and `swjob runs` show, unique among the index's runs (the engine draws a new
    id rather than repeat one), and accepted wherever a run is named."""
    return run_id.rsplit("-", 1)[-1]


class RunView(_View):
    run_id: str
    job_name: str
    pool: str
    state: str  # JobState value
    phase: str  # fsm Phase value: the current step
    created: datetime
    updated: datetime
    finished: datetime | None = None
    exit_code: int | None = None
    reason: str | None = None
    run_dir: Path
    node: NodeView | None = None
    timeline: list[Transition] = []
    boot: list[Boot] = []  # the node's boot steps as reached (engine/report/boot.py)
    transfers: dict[str, TransferProgress] = {}  # keyed by direction: "push" / "pull"
    missing_outputs: list[str] = []
    outputs_note: str | None = None  # why outputs were not collected, or which landed whole
    # without a manifest (run ended)
    cost_dollars: float | None = None
    cost_by_phase: dict[str, float] = {}  # dollars per phase so far (fsm Phase values)
    gpus: list[GpuView] = []  # the node's GPUs as sampled while a step ran
    last_sync: OutputsSynced | None = None  # the latest live output sync that landed files
    alerts: list[str] = []  # persistent warnings (e.g. a node that could not be torn down)
    all_alerts: list[str] = []  # every warning about the run, persistent or not (run.json)
    live: bool = False  # driven by this engine right now (False: from history)
    attempt: int = 1  # this run's place in its job's chain of attempts (attempts.py)
    attempts: int = 1
    previous_run: str | None = None
    first_run: str | None = None  # attempt 1 of the chain; None when this run is attempt 1
    label: str | None = None  # a variant's name, e.g. `train[LR=0.1,SEED=1]`
    sweep: str | None = None  # the sweep the run belongs to (engine/sweep/)
    sink: str | None = None  # the run's outputs in its pool's sink (docs/sink.md)
    pools_passed: list[dict[str, str]] = []  # pools that had nothing for it: pool, reason

    @property
    def name(self) -> str:
        """What to call the run: its variant's label, else its job's name."""
        return self.label or self.job_name

    @property
    def chain_id(self) -> str:
        """The run id naming the job's chain of attempts: one history entry per chain."""
        return self.first_run or self.run_id

    @property
    def terminal(self) -> bool:
        return self.state in ("COMPLETED", "FAILED")

    @property
    def stoppable(self) -> bool:
        """A stop still changes something: the node is up and not yet being torn down
        (a FAILED run's best-effort collection can be cut short, too)."""
        return self.phase not in ("teardown", "done")


class WarmNodeView(_View):
    """A node kept warm for its pool's next run (docs/warm-nodes.md), as `swjob nodes` and
    the console show it: never its warm key or its address."""

    node_id: str
    pool: str
    provider: str
    idle_s: float
    price_per_hour: float | None
    billed: float | None  # what it billed idle since it was parked (None: no price)
    expires_in_s: float
    in_use_by: str | None  # the run that claimed it (None: parked, waiting)


class PoolView(_View):
    name: str
    provider: str
    max_nodes: int
    summary: str  # e.g. "1× RTX 4090 ≥24 GB, ≤ $0.60/h" or "this machine"
    nodes: list[NodeView] = []
    max_dollars: float | None = None  # a run's cost cap on this pool (stopped past it)
    max_hours: float | None = None
    warm: list[WarmNodeView] = []  # parked for the pool's next run (any swjob process's)
