"""What a finished run gives a Python caller: one small object instead of a landing dir to
read by hand."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.api import RunView


@dataclass(frozen=True)
class Result:
    run_id: str
    name: str  # the variant's label (`train[LR=0.1]`) or the job's name
    state: str  # COMPLETED or FAILED
    exit_code: int | None
    reason: str | None  # why it FAILED, one line
    run_dir: Path
    cost_dollars: float | None
    duration_s: float  # submitted → finished, wall clock
    durations_s: dict[str, float] = field(default_factory=dict)  # seconds per phase
    manifest: dict[str, Any] | None = None  # manifest.json: each output, size, SHA-256
    view: RunView | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED"

    @property
    def outputs_dir(self) -> Path:
        return self.run_dir / "outputs"

    @classmethod
    def of(cls, view: RunView) -> Result:
        end = view.finished or view.updated
        summary = _json(view.run_dir / "run.json") or {}
        return cls(
            run_id=view.run_id,
            name=view.name,
            state=view.state,
            exit_code=view.exit_code,
            reason=view.reason,
            run_dir=view.run_dir,
            cost_dollars=view.cost_dollars,
            duration_s=max(0.0, (end - view.created).total_seconds()),
            durations_s=dict(summary.get("durations_s") or {}),
            manifest=_json(view.run_dir / "manifest.json"),
            view=view,
        )


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
