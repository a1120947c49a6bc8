"""A job's chain of attempts, kept across operator crashes: the next step is recorded
before it is taken.

When an attempt finishes and the chain goes on (engine/run/attempts.py decides), the
next attempt is fixed — the run id it will have and its attempt record: its number,
the checkpoint it carries, what the chain has spent — and recorded in the same store
write that marks the attempt over (engine/state/store.py). Only then is it taken:
started under that run id by whichever engine holds that id's lease. That is the
engine that recorded it (it took the lease before recording), at once; or, when that
engine died first, an adopter — `swjob attach` on any attempt of the chain, or the
console's adoption scan.

So a crash between "attempt k ended" and "attempt k+1 is running" leaves either
nothing to do (k not yet over: k is adopted, and its end records the step) or a
recorded step, never a decision to make again: a replay takes the same step under the
same run id, with the same carried checkpoint and the chain's spending so far. Takers
are serialised by the lease and check, after taking it, that the step is still untaken,
so attempt k+1 runs once. An end that is not retried (the job's own exit code, a stop,
a cap) records nothing, so recovery can never retry it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.jobs.pools import Pool
from engine.run.attempts import Attempt, to_record


@dataclass(frozen=True)
class NextStep:
    """The attempt after a run: recorded with that run's end, then started."""

    run_id: str
    attempt: Attempt

    def record(self) -> tuple[str, dict[str, Any]]:
        """What the store keeps of it (Store.save's `next_attempt`)."""
        return self.run_id, to_record(self.attempt)


@dataclass
class Chains:
    """The chains one engine drives: each live run's pool as configured (its caps are for
    the whole chain), the steps recorded and not yet taken, and the successors started."""

    pools: dict[str, Pool] = field(default_factory=dict)
    _recorded: dict[str, NextStep] = field(default_factory=dict)
    _started: dict[str, str] = field(default_factory=dict)

    def recorded(self, previous: str, step: NextStep) -> NextStep:
        self._recorded[previous] = step
        return step

    def take(self, previous: str) -> NextStep | None:
        """The step recorded after `previous`, once (None: the chain ends there)."""
        return self._recorded.pop(previous, None)

    def started(self, previous: str, run_id: str) -> None:
        self._started[previous] = run_id

    def successor(self, previous: str) -> str | None:
        return self._started.get(previous)
