"""Next attempt: a run its node let down is run again on a new node, resuming.

One job → one node → one attempt (the spec's v1) stays true for every run; recovery is
built above it: when an attempt ends FAILED because its node was taken back
("preempted") or lost ("node lost"), and the pool allows more (`max_attempts`, or
`swjob run --attempts N`), the engine starts the next attempt as a new run of the same
job on the same pool. Its workspace push also carries the previous attempt's outputs/
(the last synced outputs, see livesync.py) laid where the job wrote them, so a job that
resumes from its checkpoints continues. A job that failed by its own exit code, a stop
by the operator or a cap is never retried. The caps hold for the whole chain: each
attempt may spend only what the earlier ones left.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent.inflight import holds_outputs
from engine.jobs.pools import Caps, Pool
from engine.report.views import RunView

RETRYABLE = ("preempted", "node lost", "container restarted")


@dataclass(frozen=True)
class Attempt:
    """Where a run stands in its chain of attempts."""

    number: int
    of: int
    first: str  # the run id of attempt 1
    previous: str | None = None
    carried: Path | None = None  # the previous attempt's outputs/, pushed into the workdir
    spent_dollars: float = 0.0  # what the earlier attempts cost
    spent_hours: float = 0.0  # how long the earlier attempts ran


def to_record(attempt: Attempt) -> dict[str, Any]:
    """The attempt as the run's recovery facts keep it (a restarted engine chains on)."""
    record = asdict(attempt)
    record["carried"] = str(attempt.carried) if attempt.carried else None
    return record


def from_record(record: Any) -> Attempt | None:
    """The attempt a run recorded; None for a run from before attempts were recorded."""
    if not isinstance(record, dict):
        return None
    carried = record.get("carried")
    try:
        return Attempt(**{**record, "carried": Path(carried) if carried else None})
    except TypeError:
        return None


def first_attempt(run_id: str, pool: Pool) -> Attempt:
    return Attempt(number=1, of=pool.max_attempts, first=run_id)


def retryable(view: RunView) -> bool:
    """The node failed the run, not the job: preempted, lost, or its container restarted."""
    return view.state == "FAILED" and (view.reason or "").startswith(RETRYABLE)


def _left(cap: float | None, spent: float) -> float | None:
    return None if cap is None else cap - spent


def capped(pool: Pool, attempt: Attempt | None) -> Pool:
    """`pool` with the caps the earlier attempts of the chain left for this one."""
    if attempt is None or attempt.spent_dollars == attempt.spent_hours == 0:
        return pool
    caps = pool.caps
    left = Caps(
        max_dollars=_left(caps.max_dollars, attempt.spent_dollars),
        max_hours=_left(caps.max_hours, attempt.spent_hours),
    )
    return pool.model_copy(update={"caps": left})


def next_attempt(view: RunView, pool: Pool, attempt: Attempt) -> Attempt | None:
    """The attempt after `view` ended on `pool` (its caps as configured, for the whole
    chain); None when there is none (done, not retryable, attempts or money used up)."""
    if attempt.number >= attempt.of or not retryable(view):
        return None
    ran_h = ((view.finished or view.updated) - view.created).total_seconds() / 3600
    dollars = attempt.spent_dollars + (view.cost_dollars or 0.0)
    hours = attempt.spent_hours + ran_h
    caps = pool.caps
    left_dollars, left_hours = _left(caps.max_dollars, dollars), _left(caps.max_hours, hours)
    if any(left is not None and left <= 0 for left in (left_dollars, left_hours)):
        return None
    outputs = view.run_dir / "outputs"
    return Attempt(
        number=attempt.number + 1,
        of=attempt.of,
        first=attempt.first,
        previous=view.run_id,
        carried=outputs if holds_outputs(outputs) else None,
        spent_dollars=dollars,
        spent_hours=hours,
    )
