"""GPU telemetry as a run tells it: per-GPU views, run.json's summary, the idle alarm.

Samples come from the node (agent/gpu.py) stamped with the node's clock, so time is
measured there: a burst of samples replayed after a reconnect counts the minutes it
covered, not the milliseconds it took to arrive, and a sample already counted (seen
again after an operator restart) is skipped. A gap longer than `MAX_GAP_S` (no step
was running, the agent was gone) is not counted as GPU time.
"""

from __future__ import annotations

from typing import Any

from engine.report import events as ev
from engine.report.views import GpuView

WINDOW = 60  # samples kept for a sparkline: 2 minutes at the default 2 s
MAX_GAP_S = 10.0
IDLE_PCT = 5.0


def fold_gpus(gpus: list[GpuView], event: ev.GpuMetrics) -> list[GpuView]:
    """The views after one more sample of every GPU."""
    by_index = {g.index: g for g in gpus}
    for sample in event.gpus:
        old = by_index.get(sample.index) or GpuView(index=sample.index)
        if old.samples and event.t <= old.last_t:
            continue  # seen before (a replay after an operator restart)
        util = sample.util_pct or 0.0
        mem = sample.mem_used_mb or 0.0
        gap = event.t - old.last_t if old.samples else 0.0
        by_index[sample.index] = old.model_copy(
            update={
                "util_recent": [*old.util_recent[-(WINDOW - 1) :], util],
                "util_pct": sample.util_pct,
                "mem_used_mb": sample.mem_used_mb,
                "mem_total_mb": sample.mem_total_mb,
                "power_w": sample.power_w,
                "temp_c": sample.temp_c,
                "samples": old.samples + 1,
                "util_sum": old.util_sum + util,
                "util_peak": max(old.util_peak, util),
                "mem_sum_mb": old.mem_sum_mb + mem,
                "mem_peak_mb": max(old.mem_peak_mb, mem),
                "seconds": old.seconds + (gap if 0 < gap <= MAX_GAP_S else 0.0),
                "last_t": event.t,
            }
        )
    return [by_index[i] for i in sorted(by_index)]


def gpu_summary(gpus: list[GpuView]) -> dict[str, Any] | None:
    """run.json's `gpu`: mean and peak utilisation and memory per GPU, and GPU-hours."""
    if not gpus:
        return None
    per_gpu = [
        {
            "index": g.index,
            "util_mean_pct": round(g.util_sum / g.samples, 1),
            "util_peak_pct": g.util_peak,
            "mem_mean_mb": round(g.mem_sum_mb / g.samples),
            "mem_peak_mb": g.mem_peak_mb,
            "mem_total_mb": g.mem_total_mb,
            "samples": g.samples,
        }
        for g in gpus
        if g.samples
    ]
    return {
        "gpus": per_gpu,
        "util_mean_pct": round(sum(g["util_mean_pct"] for g in per_gpu) / len(per_gpu), 1),
        "util_peak_pct": max(g["util_peak_pct"] for g in per_gpu),
        "gpu_hours": round(sum(g.seconds for g in gpus) / 3600, 4),
    }


class IdleGpuWatch:
    """Raises the alarm once per idle stretch: every GPU under `pct` for `after_s` while
    the job's `run` step runs — a stalled job that still bills. The same watch, with the
    pool's `idle_gpu_stop_s`, stops such a run (engine/run/orchestrator.py)."""

    def __init__(self, after_s: float, pct: float = IDLE_PCT) -> None:
        self.after_s = after_s
        self.pct = pct
        self._idle_since: float | None = None
        self._alerted = False
        self.stretch_s = 0.0  # the idle stretch so far, as of the last sample

    def observe(self, event: ev.GpuMetrics, running: bool) -> str | None:
        """The alert's message when this sample completes an idle stretch, else None."""
        utils = [g.util_pct for g in event.gpus if g.util_pct is not None]
        if not running or not utils or max(utils) >= self.pct:
            self._idle_since, self._alerted, self.stretch_s = None, False, 0.0
            return None
        if self._idle_since is None:
            self._idle_since = event.t
        self.stretch_s = event.t - self._idle_since
        if self._alerted or self.stretch_s < self.after_s:
            return None
        self._alerted = True
        return (
            f"GPUs idle: under {self.pct:g} % for {duration(self.stretch_s)} "
            "while the job runs — stalled? the node still bills"
        )


def duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"
