"""A job's attempts as the job detail lists them: the attempts beneath the board's row.

The board shows a job that took several attempts as one row, its latest attempt's; the
detail of any attempt lists them all — state, why it ended, what it cost — and `[` / `]`
open the attempt before or after the one shown (k9s shows a restarted container's
previous logs the same way: from the one you are on).
"""

from __future__ import annotations

from rich.text import Text

from engine.api import RunView, money
from tui import format as fmt

HINT = "[ ] previous / next attempt"


def attempts_text(chain: list[RunView], shown: str) -> Text:
    """One line per attempt (the one shown marked), then what they cost in all and the
    keys."""
    text = Text()
    for run in chain:
        here = run.run_id == shown
        text.append("▸ " if here else "  ", style="bold")
        text.append(
            f"attempt {run.attempt}/{run.attempts}  {run.run_id}  ", style="bold" if here else ""
        )
        text.append_text(fmt.state_text(run.state))
        if run.cost_dollars is not None:  # a node with a price (a rented one)
            text.append(f"  {money(run.cost_dollars)}")
        if run.state == "FAILED" and run.reason:
            text.append(f"  {fmt.one_line(run.reason)}", style="dim")
        text.append("\n")
    costs = [r.cost_dollars for r in chain if r.cost_dollars is not None]
    text.append(f"{len(chain)} attempts", style="bold")
    if costs:
        text.append(f", {money(sum(costs))} in all", style="bold")
    return text.append(f"  ·  {HINT}", style="dim")


def neighbour(chain: list[RunView], run_id: str, step: int) -> str | None:
    """The attempt `step` away from `run_id` in its chain (None: there is none)."""
    ids = [run.run_id for run in chain]
    if run_id not in ids:
        return None
    at = ids.index(run_id) + step
    return ids[at] if 0 <= at < len(ids) else None
