"""Pure text formatting for the console: durations, sizes, rates, state colours.

Kept free of Textual so the same figures read the same on every screen, and so
they can be tested without an app.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from rich.text import Text

from engine.views import NodeView

STATE_STYLES = {
    "PENDING": "bold yellow",
    "RUNNING": "bold cyan",
    "COMPLETED": "bold green",
    "FAILED": "bold red",
}

NODE_STYLES = {
    "provisioning": "yellow",
    "ready": "green",
    "busy": "cyan",
    "tearing_down": "magenta",
    "gone": "dim",
}

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLES.get(state, ""))


def node_state_text(state: str) -> Text:
    return Text(state.replace("_", " "), style=NODE_STYLES.get(state, ""))


def duration(seconds: float | timedelta | None) -> str:
    """Compact h/m/s form an operator reads at a glance: 9s, 4m05s, 2h03m."""
    if seconds is None:
        return "—"
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def size(n: float) -> str:
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def rate(bps: float) -> str:
    return f"{size(bps)}/s"


def clock_time(ts: datetime) -> str:
    """Wall time of an event in the operator's local zone."""
    return ts.astimezone().strftime("%H:%M:%S")


def money(dollars: float | None) -> str:
    return "—" if dollars is None else f"${dollars:.2f}"


def gpu_summary(node: NodeView | None) -> str:
    """'2× RTX 4090 24 GB' from the node's facts, or '' when it reported none."""
    if node is None or node.facts is None or not node.facts.gpus:
        return ""
    first = node.facts.gpus[0]
    mem = f" {first.memory_mb // 1024} GB" if first.memory_mb else ""
    return f"{len(node.facts.gpus)}× {first.name}{mem}"


def price(per_hour: float | None) -> str:
    return "" if per_hour is None else f"${per_hour:.2f}/h"


def one_line(text: str, limit: int = 200) -> str:
    """Messages shown inline must stay on one line of the modal."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
