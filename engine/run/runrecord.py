"""What a run leaves behind besides its outputs: log files, phase timings, cost, run.json.

Kept apart from the orchestrator so the "what happened" bookkeeping stays readable
on its own and the driver only decides "what happens next".
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pydantic_core

from agent.protocol import LogLine, Step
from engine.report import events as ev
from engine.report.appender import AppendFile, open_append
from engine.report.boot import boot_timeline, provisioning_start
from engine.report.views import RunView
from engine.report.warnonce import WarnOnce
from engine.state.wholefile import replace_whole

log = logging.getLogger("swjob.engine")


class PhaseClock:
    """When each phase began, in wall-clock time: durations and the cost split derive from it.

    Wall clock, not monotonic, because a run outlives the engine process that started
    it: a restarted engine replays the run's transitions (`replay`) and the phase the
    run was in while nobody watched keeps its time (and its cost)."""

    def __init__(self) -> None:
        self.entered: dict[str, datetime] = {}
        self._starts: list[tuple[str, float]] = []

    def enter(self, phase: str, at: datetime | None = None) -> None:
        when = at or datetime.now(UTC)
        self.entered.setdefault(phase, when)
        self._starts.append((phase, when.timestamp()))

    def replay(self, events: list[ev.Event]) -> None:
        """Rebuild the clock from a run's event log (recovery after an engine restart)."""
        for event in events:
            if isinstance(event, ev.Transition):
                self.enter(event.to_phase, event.ts)

    def spans(self, until: float | None = None) -> list[tuple[str, float, float]]:
        """(phase, start, end) in epoch seconds; the current phase ends at `until` or now."""
        end = time.time() if until is None else until
        ends = [start for _, start in self._starts[1:]] + [end]
        return [
            (phase, start, max(start, stop))
            for (phase, start), stop in zip(self._starts, ends, strict=True)
        ]

    def durations(self, until: float | None = None) -> dict[str, float]:
        """Seconds spent in each phase so far (a phase re-entered accumulates)."""
        spans: dict[str, float] = {}
        for phase, start, end in self.spans(until):
            spans[phase] = spans.get(phase, 0.0) + end - start
        return spans


def cost_by_phase(
    price_per_hour: float, spans: list[tuple[str, float, float]], since: float | None
) -> dict[str, float]:
    """Dollars per phase: price × the part of each phase the node was alive (from `since`,
    when it began to bill; None counts whole phases). The last phase (done) bills nothing."""
    start = since if since is not None else float("-inf")
    cost: dict[str, float] = {}
    for phase, begin, end in spans:
        if phase in ("new", "done"):
            continue
        seconds = max(0.0, end - max(begin, start))
        cost[phase] = cost.get(phase, 0.0) + price_per_hour * seconds / 3600
    return cost


class LogFiles:
    """The operator-side copy of each step's output: logs/<step>.log, lines as printed."""

    def __init__(self, logs_dir: Path) -> None:
        self._dir = logs_dir
        self._dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[Step, AppendFile] = {}
        self._unwritten = WarnOnce(log)  # steps whose log a write failed on

    def path(self, step: Step) -> Path:
        return self._dir / f"{step.value}.log"

    def open(self, step: Step) -> AppendFile:
        """The step's log, created when the step starts (so a silent step has an empty log)."""
        handle = self._files.get(step)
        if handle is None:
            handle = self._files[step] = open_append(self.path(step))
        return handle

    def write(self, step: Step, lines: list[LogLine]) -> None:
        """Queued, not written here: the disk may be slow (engine/report/appender.py)."""
        handle = self.open(step)
        try:
            handle.write("".join(f"{line.text}\n" for line in lines))
        except OSError as exc:  # an earlier write failed (its disk full): the run goes on
            self._not_written(step, exc)

    def _not_written(self, step: Step, exc: OSError) -> None:
        """Lines of `step` did not reach its log. Said once a step; nothing else stops:
        the lines are still published (printed, in the console) and the run driven on —
        a raise here dropped the node's batch and ended the run's bookkeeping early."""
        self._unwritten.warn(step, "%s is missing lines: %s", self.path(step), exc)

    def restore(self, events: list[ev.Event]) -> None:
        """Rewrite each step's log from the run's datastream, before an adopted run goes on.

        A batch lands here just after its Log event reaches events.jsonl; an owner killed
        between the two leaves the datastream holding lines the files lack (and an older
        engine wrote the files first, leaving lines the node then replays: it resumes after
        the last sequence number in events.jsonl). The datastream is the record, so the
        files are made to say exactly what it says."""
        by_step: dict[Step, list[str]] = {}
        for event in events:
            if isinstance(event, ev.Log):
                by_step.setdefault(Step(event.step), []).extend(line.text for line in event.lines)
        self.close()
        for step in Step:
            if step not in by_step and not self.path(step).exists():
                continue
            texts = by_step.get(step, [])
            text = "".join(f"{line}\n" for line in texts)
            replace_whole(self.path(step), text, temp=self.path(step).with_suffix(".log.restoring"))

    def close(self) -> None:
        """Close the logs once all their lines are on them (blocks: see `aclose`)."""
        while self._files:
            step, handle = self._files.popitem()
            try:
                handle.close()
            except OSError as exc:
                self._not_written(step, exc)

    async def aclose(self) -> None:
        while self._files:
            step, handle = self._files.popitem()
            try:
                await handle.aclose()
            except OSError as exc:  # raised here, the run never published its Finished
                self._not_written(step, exc)


def _sync_summary(view: RunView) -> dict[str, Any] | None:
    """When the last live sync landed and what it held (None: no sync landed anything)."""
    sync = view.last_sync
    if sync is None:
        return None
    fields = {"files", "bytes", "paths", "held", "syncs"}
    return {"at": sync.ts.isoformat(), **sync.model_dump(mode="json", include=fields)}


def write_run_json(view: RunView, clock: PhaseClock, extra: dict[str, Any]) -> Path:
    """Atomically write run.json: a reader never sees a half-written summary."""
    return write_summary(view.run_dir, run_summary(view, clock, extra))


def run_summary(view: RunView, clock: PhaseClock, extra: dict[str, Any]) -> dict[str, Any]:
    """What run.json says (taken at once: the clock goes on changing after it)."""
    node = view.node
    summary: dict[str, Any] = {
        "run_id": view.run_id,
        "job_name": view.job_name,
        "pool": view.pool,
        "pools_passed": view.pools_passed,  # before `pool` served (engine/run/fallover.py)
        "state": view.state,
        "exit_code": view.exit_code,
        "reason": view.reason,
        "created": view.created.isoformat(),
        "finished": view.finished.isoformat() if view.finished else None,
        "timestamps": {phase: ts.isoformat() for phase, ts in clock.entered.items()},
        "durations_s": {k: round(v, 3) for k, v in clock.durations().items()},
        "node": node.model_dump(mode="json") if node else None,
        "boot": boot_timeline(provisioning_start(view.timeline), view.boot).summary(),
        "cost_dollars": view.cost_dollars,
        "missing_outputs": view.missing_outputs,
        "last_sync": _sync_summary(view),
        "attempt": {
            "number": view.attempt,
            "of": view.attempts,
            "first": view.chain_id,
            "previous": view.previous_run,
        },
        "alerts": view.all_alerts,
        "persistent_alerts": view.alerts,
        **extra,
    }
    return summary


def write_summary(run_dir: Path, summary: dict[str, Any]) -> Path:
    """Atomically write `summary` as the run's run.json: a reader never sees half of it.
    Indented by pydantic's encoder: the json module indents in Python, a third of the
    writer thread's CPU per run in a hundred short runs (tests/bench/engine_load.py)."""
    try:
        text = pydantic_core.to_json(summary, indent=2).decode()
    except pydantic_core.PydanticSerializationError:  # a lone surrogate (a path that is
        text = json.dumps(summary, indent=2)  # not UTF-8): json escapes what pydantic refuses
    return replace_whole(run_dir / "run.json", text + "\n")
