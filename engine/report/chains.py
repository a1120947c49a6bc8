"""History by job: a job's chain of attempts is one entry, its attempts beneath it.

Each attempt is a run of its own (engine/run/attempts.py), and every run names its
chain (`RunView.chain_id`: attempt 1's run id). `swjob runs` and the console group by it:
the entry shows what the job as a whole did — the latest attempt's state, `attempt 2/3`,
the cost of all its attempts — and the attempts stay reachable one by one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.report.views import RunView


@dataclass(frozen=True)
class Chain:
    """One job's attempts, oldest first (a job that ran once has one)."""

    attempts: tuple[RunView, ...]

    @property
    def latest(self) -> RunView:
        return self.attempts[-1]

    @property
    def cost_dollars(self) -> float | None:
        """What every attempt cost together; None while none has a cost."""
        costs = [a.cost_dollars for a in self.attempts if a.cost_dollars is not None]
        return sum(costs) if costs else None


def chains(runs: Iterable[RunView]) -> list[Chain]:
    """The runs grouped into chains, the chain with the most recent attempt first."""
    grouped: dict[str, list[RunView]] = {}
    for run in runs:
        grouped.setdefault(run.chain_id, []).append(run)
    found = [
        Chain(tuple(sorted(g, key=lambda r: (r.attempt, r.created)))) for g in grouped.values()
    ]
    return sorted(found, key=lambda c: c.latest.created, reverse=True)
