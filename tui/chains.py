"""The board's rows by job: a job's chain of attempts is one row, its latest attempt's.

`engine.api.chains` groups a whole history at once; the board also learns of runs one
tick at a time (a next attempt appears while the one before it is still on screen), so
this keeps, per chain, every attempt seen so far with what it cost.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.api import RunView


class ChainRows:
    def __init__(self) -> None:
        self._seen: dict[str, dict[str, tuple[int, float | None]]] = {}  # chain → run → (n, $)

    def see(self, runs: Iterable[RunView]) -> None:
        for run in runs:
            self._seen.setdefault(run.chain_id, {})[run.run_id] = (run.attempt, run.cost_dollars)

    def latest(self, chain_id: str) -> str:
        """The run id of the chain's latest attempt seen (the one its row shows)."""
        attempts = self._seen[chain_id]
        return max(attempts, key=lambda run_id: attempts[run_id][0])

    def is_latest(self, run: RunView) -> bool:
        return self.latest(run.chain_id) == run.run_id

    def replaced(self) -> dict[str, str]:
        """Earlier attempts (whose rows must go) → the attempt that replaced them."""
        return {
            run_id: self.latest(chain_id)
            for chain_id, attempts in self._seen.items()
            for run_id in attempts
            if run_id != self.latest(chain_id)
        }

    def cost(self, run: RunView) -> float | None:
        """What the run's whole job has cost: all its attempts seen."""
        costs = [cost for _, cost in self._seen.get(run.chain_id, {}).values() if cost is not None]
        return sum(costs) if costs else None
