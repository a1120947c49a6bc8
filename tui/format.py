"""Pure text formatting for the console: durations, sizes, rates, state colours.

Kept free of Textual so the same figures read the same on every screen, and so
they can be tested without an app.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from rich.text import Text

from engine.api import NodeView, RunView

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
    "unconfirmed": "bold red",
    "warm": "yellow",  # kept for the next run: it bills while it idles
}

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def why(run: RunView) -> str:
    """Why a run ended, in a word or two: the row's reason (the preview says it whole)."""
    reason = run.reason or ""
    if run.state == "COMPLETED":
        return f"exit {run.exit_code or 0}"
    if not run.terminal and not reason:
        return "—" if run.exit_code is None else f"exit {run.exit_code}"
    for start, short in (
        ("run exited with code ", "exit "),
        ("setup failed with code ", "setup "),
    ):
        if reason.startswith(start):
            return short + reason.removeprefix(start)
    for start, short in (
        ("cap reached", "cap"),
        ("stopped", "stopped"),
        ("node lost", "lost"),
        ("preempted", "preempted"),
        ("node did not rejoin", "lost"),
        ("abandoned", "abandoned"),
    ):
        if reason.startswith(start):
            return short
    if run.exit_code is not None:
        return f"exit {run.exit_code}"
    return reason.split(":")[0][:12] or "—"


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLES.get(state, ""))


def node_state_text(state: str) -> Text:
    return Text(state.replace("_", " "), style=NODE_STYLES.get(state, ""))


def duration(seconds: float | timedelta | None, *, tenths: bool = False) -> str:
    """Compact h/m/s form an operator reads at a glance: 9s, 4m05s, 2h03m. With `tenths`,
    a span under a second reads 0.3s: a timeline step that took 300 ms is not "0s"."""
    if seconds is None:
        return "—"
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    if tenths and 0 <= seconds < 1:
        return f"{seconds:.1f}s"
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


def gpu_summary(node: NodeView | None) -> str:
    """'2× RTX 4090 24 GB' from the node's facts, or '' when it reported none."""
    if node is None or node.facts is None or not node.facts.gpus:
        return ""
    first = node.facts.gpus[0]
    mem = f" {first.memory_mb // 1024} GB" if first.memory_mb else ""
    return f"{len(node.facts.gpus)}× {first.name}{mem}"


def price(per_hour: float | None) -> str:
    return "" if per_hour is None else f"${per_hour:.2f}/h"


def short_node_id(node: NodeView) -> str:
    """A local node's id repeats its run id (`local-<run id>-ab12`); the board already
    shows the run, so the node column keeps only what tells nodes apart."""
    if node.run_id and f"-{node.run_id}-" in node.node_id:
        return node.node_id.replace(f"-{node.run_id}", "", 1)
    return node.node_id


def offer_summary(node: NodeView | None) -> str:
    """The rented offer's facts as one line: GPU, $/h, location, reliability, offer id."""
    if node is None or not node.offer or "gpu_name" not in node.offer:
        return ""
    offer = node.offer
    gpus = f"{offer.get('num_gpus') or 1}× {offer.get('gpu_name')}"
    mem = offer.get("gpu_ram_mb")
    parts = [f"{gpus} {int(mem) // 1000} GB" if isinstance(mem, int | float) else gpus]
    parts.append(
        price(node.price_per_hour if node.price_per_hour is not None else _num(offer, "dph"))
    )
    if offer.get("geolocation"):
        parts.append(str(offer["geolocation"]))
    if isinstance(offer.get("reliability"), int | float):
        parts.append(f"reliability {float(offer['reliability']):.3f}")  # type: ignore[arg-type]
    if offer.get("offer_id") is not None:
        parts.append(f"offer {offer['offer_id']}")
    return " · ".join(p for p in parts if p)


def _num(offer: dict[str, str | float | int | None], key: str) -> float | None:
    value = offer.get(key)
    return float(value) if isinstance(value, int | float) else None


def one_line(text: str, limit: int = 200) -> str:
    """Messages shown inline must stay on one line of the modal."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
