"""GPU telemetry in the console: a sparkline for the board's row, bars and sparklines per
GPU in the detail. Pure text builders plus one small widget; nothing is drawn for a run
whose node sent no GPU samples (a CPU node, or the local pool)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from engine.api import GpuView, RunView

TICKS = "▁▂▃▄▅▆▇█"
BAR_WIDTH = 20
SPARK_WIDTH = 30
ROW_SPARK = 8


def sparkline(values: list[float], width: int) -> str:
    """The last `width` percentages as block characters (0 % ▁ … 100 % █)."""
    last = values[-width:]
    return "".join(TICKS[min(len(TICKS) - 1, max(0, int(v / 100 * len(TICKS))))] for v in last)


def row_sparkline(run: RunView) -> str:
    """The busiest GPU's recent utilisation, for the board's step cell of a live run."""
    if run.terminal or not run.gpus:
        return ""
    window = min(len(g.util_recent) for g in run.gpus)
    busiest = [max(g.util_recent[-window + i] for g in run.gpus) for i in range(window)]
    return sparkline(busiest, ROW_SPARK)


def _bar(pct: float | None, width: int = BAR_WIDTH) -> Text:
    value = max(0.0, min(100.0, pct or 0.0))
    filled = round(value / 100 * width)
    style = "green" if value >= 50 else "yellow" if value >= 5 else "red"
    return Text.assemble(("█" * filled, style), ("░" * (width - filled), "dim"))


def _gb(mb: float | None) -> str:
    return "—" if mb is None else f"{mb / 1024:.1f}"


def gpu_line(gpu: GpuView) -> Text:
    util = "—" if gpu.util_pct is None else f"{gpu.util_pct:3.0f}%"
    mem_pct = (
        100 * gpu.mem_used_mb / gpu.mem_total_mb
        if gpu.mem_used_mb is not None and gpu.mem_total_mb
        else None
    )
    extras = "  ".join(
        part
        for part in (
            f"{gpu.power_w:.0f} W" if gpu.power_w is not None else "",
            f"{gpu.temp_c:.0f}°C" if gpu.temp_c is not None else "",
        )
        if part
    )
    return Text.assemble(
        (f"GPU{gpu.index} ", "bold"),
        _bar(gpu.util_pct),
        f" {util}  mem ",
        _bar(mem_pct, BAR_WIDTH // 2),
        f" {_gb(gpu.mem_used_mb)}/{_gb(gpu.mem_total_mb)} GB  ",
        (extras + "  " if extras else "", "dim"),
        (sparkline(gpu.util_recent, SPARK_WIDTH), "cyan"),
    )


def gpu_text(gpus: list[GpuView]) -> Text:
    return Text("\n").join(gpu_line(g) for g in gpus)


class GpuPanel(Static):
    """The detail's GPU lines; hidden while there is nothing to show."""

    def show(self, run: RunView) -> None:
        self.display = bool(run.gpus)
        if run.gpus:
            self.update(gpu_text(run.gpus))
