"""A sweep as the board groups it: counts, cost against its cap, best metric — pure, from
the sweep's record (engine/sweep/record.py) and the views of its runs, so the group row
says the same whether this console or another process drives the sweep."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine.api import RunView, SweepRecord, money


@dataclass(frozen=True)
class GroupSummary:
    done: int  # COMPLETED
    running: int  # submitted, not ended
    queued: int  # not submitted yet (held, once the sweep halted)
    failed: int
    cost: float
    cap: float | None
    best: tuple[str, float] | None
    halted: str | None

    def line(self, record: SweepRecord) -> str:
        """The group row: `sweep s…-ab12cd train · 4 done · 2 running · 3 queued · 1 failed
        · $0.42 / $5.00 · best val_loss 0.031 (train[LR=0.01])`."""
        waiting = "held" if self.halted else "queued"
        parts = [
            f"sweep {record.sweep_id} {record.job_name}",
            f"{self.done} done",
            f"{self.running} running",
            f"{self.queued} {waiting}",
            f"{self.failed} failed",
            money(self.cost) + (f" / {money(self.cap)}" if self.cap is not None else ""),
        ]
        if self.best is not None:
            key = (record.metric or "metric").rpartition(":")[2]
            parts.append(f"best {key} {self.best[1]:g} ({self.best[0]})")
        if self.halted:
            parts.append(f"halted: {self.halted}")
        return " · ".join(parts)


def summarize(record: SweepRecord, views: Mapping[str, RunView]) -> GroupSummary:
    done = running = queued = failed = 0
    cost = 0.0
    for member in record.members:
        view = views.get(member.run_id) if member.run_id else None
        if view is None:
            queued += member.run_id is None
            running += member.run_id is not None  # submitted, not in the index yet
            continue
        cost += view.cost_dollars or 0.0
        if view.state == "COMPLETED":
            done += 1
        elif view.state == "FAILED":
            failed += 1
        else:
            running += 1
    return GroupSummary(done, running, queued, failed, cost, record.max_dollars,
                        record.best(), record.halted)  # fmt: skip
