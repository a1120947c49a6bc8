"""Where a run's outputs can be had — the laptop's landing dir, the pool's sink, both —
for `swjob runs` and the console (a run whose laptop is gone still has them in the sink)."""

from __future__ import annotations

from agent.inflight import holds_outputs
from engine.report.views import RunView


def outputs_where(view: RunView) -> str:
    """ "laptop", "sink", "both" or "" (none yet)."""
    laptop = holds_outputs(view.run_dir / "outputs")
    if view.sink and laptop:
        return "both"
    return "sink" if view.sink else "laptop" if laptop else ""
