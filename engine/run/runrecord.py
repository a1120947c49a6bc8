"""What a run leaves behind besides its outputs: log files, phase timings, cost, run.json.

Kept apart from the orchestrator so the "what happened" bookkeeping stays readable
on its own and the driver only decides "what happens next".
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from agent.protocol import LogLine, Step
from engine.report.views import RunView


class PhaseClock:
    """When each phase began; durations and cost split by phase derive from it."""

    def __init__(self) -> None:
        self.entered: dict[str, datetime] = {}
        self._mono: list[tuple[str, float]] = []

    def enter(self, phase: str) -> None:
        self.entered.setdefault(phase, datetime.now(UTC))
        self._mono.append((phase, time.monotonic()))

    def durations(self, until: float | None = None) -> dict[str, float]:
        """Seconds spent in each phase so far (a phase re-entered accumulates)."""
        end = time.monotonic() if until is None else until
        spans: dict[str, float] = {}
        for (phase, start), nxt in zip(self._mono, [*self._mono[1:], ("", end)], strict=True):
            spans[phase] = spans.get(phase, 0.0) + max(0.0, nxt[1] - start)
        return spans


def cost_by_phase(price_per_hour: float, durations: dict[str, float]) -> dict[str, float]:
    """Dollars per billed phase: price × time, from provisioning on (the node bills from then)."""
    billed = {k: v for k, v in durations.items() if k not in ("new", "done")}
    return {phase: price_per_hour * seconds / 3600 for phase, seconds in billed.items()}


class LogFiles:
    """The operator-side copy of each step's output: logs/<step>.log, lines as printed."""

    def __init__(self, logs_dir: Path) -> None:
        self._dir = logs_dir
        self._dir.mkdir(parents=True, exist_ok=True)
        self._files: dict[Step, IO[str]] = {}

    def path(self, step: Step) -> Path:
        return self._dir / f"{step.value}.log"

    def open(self, step: Step) -> IO[str]:
        """The step's log, created when the step starts (so a silent step has an empty log)."""
        handle = self._files.get(step)
        if handle is None:
            handle = self._files[step] = self.path(step).open("a", encoding="utf-8")
        return handle

    def write(self, step: Step, lines: list[LogLine]) -> None:
        handle = self.open(step)
        handle.write("".join(f"{line.text}\n" for line in lines))
        handle.flush()

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()


def write_run_json(view: RunView, clock: PhaseClock, extra: dict[str, Any]) -> Path:
    """Atomically write run.json: a reader never sees a half-written summary."""
    node = view.node
    summary = {
        "run_id": view.run_id,
        "job_name": view.job_name,
        "pool": view.pool,
        "state": view.state,
        "exit_code": view.exit_code,
        "reason": view.reason,
        "created": view.created.isoformat(),
        "finished": view.finished.isoformat() if view.finished else None,
        "timestamps": {phase: ts.isoformat() for phase, ts in clock.entered.items()},
        "durations_s": {k: round(v, 3) for k, v in clock.durations().items()},
        "node": node.model_dump(mode="json") if node else None,
        "cost_dollars": view.cost_dollars,
        "missing_outputs": view.missing_outputs,
        "alerts": view.alerts,
        **extra,
    }
    path = view.run_dir / "run.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
