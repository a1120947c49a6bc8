"""Optuna trials as swjob runs: Optuna searches, swjob executes (extra `swjob[optuna]`).

Optuna's ask-and-tell keeps the search and its storage — a SQLite file by default, any
RDB URL Optuna accepts when several operators on several machines share one study; each
asks its own trials, the storage numbers them. An `Executor` asks a trial, runs the job
with the trial's parameters in its env on a node of the pool, reads the objective from a
declared output (`FILE:KEY`, as `swjob sweep --metric`) and tells Optuna:

- COMPLETED with the objective → a complete trial with that value;
- FAILED, or COMPLETED without a readable objective → a failed trial (the run's reason in
  the trial's `swjob_reason` user attribute);
- a job that prints `optuna-report STEP VALUE` lines reports intermediate values; when
  the study's pruner says prune, the run is stopped on its node (the operator's stop:
  outputs collected, node torn down) and the trial told PRUNED.

At most `concurrency` trials are in flight at once. Every trial carries its run id
(`swjob_run`) so a study's history leads back to logs and outputs.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from engine.api import JobSpec, Metric, SubmitError, events, load_job
from swjob.session import AsyncSession, JobLike, Run
from swjob.sync import Session

DEFAULT_STORAGE = "sqlite:///swjob-optuna.db"
SQLITE_WAIT_S = 60
REPORT = re.compile(r"^optuna-report\s+(\d+)\s+(\S+)\s*$")
"""An intermediate value the job prints: `optuna-report STEP VALUE` on a line of its own."""

Space = Callable[[optuna.Trial], Mapping[str, Any]]
"""Suggests one trial's parameters: `lambda t: {"LR": t.suggest_float("LR", 1e-4, 1e-1)}`."""


def create_study(
    study_name: str, storage: str | None = DEFAULT_STORAGE, **options: Any
) -> optuna.Study:
    """Optuna's own study, created or loaded: on a SQLite file by default; an RDB URL
    (`postgresql://…`, `mysql://…`) lets several operators share it. A SQLite file waits
    up to a minute for another process's write (two executors on one machine) instead of
    failing at once with "database is locked"."""
    chosen: Any = storage
    if isinstance(storage, str) and storage.startswith("sqlite:"):
        engine_kwargs = {"connect_args": {"timeout": SQLITE_WAIT_S}}
        chosen = optuna.storages.RDBStorage(storage, engine_kwargs=engine_kwargs)
    return optuna.create_study(
        study_name=study_name, storage=chosen, load_if_exists=True, **options
    )


@dataclass(frozen=True)
class TrialOutcome:
    number: int
    run_id: str | None
    state: TrialState
    value: float | None
    reason: str | None


class Executor:
    """Runs `study`'s trials as runs of `job` on `pool` through an AsyncSession."""

    def __init__(
        self,
        session: AsyncSession,
        study: optuna.Study,
        job: JobLike,
        space: Space,
        *,
        objective: str,
        pool: str = "local",
        concurrency: int = 4,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.session, self.study, self.space = session, study, space
        self.job = job if isinstance(job, JobSpec) else load_job(Path(job))
        self.objective = Metric.parse(objective)
        self.pool, self.concurrency = pool, concurrency

    async def optimize(self, n_trials: int) -> list[TrialOutcome]:
        """Run `n_trials` trials, `concurrency` at a time; their outcomes in ask order.
        Cancelled, the trials in flight are stopped on their nodes and told FAIL."""
        slots = asyncio.Semaphore(self.concurrency)

        async def one() -> TrialOutcome:
            async with slots:
                return await self._trial()

        return list(await asyncio.gather(*(one() for _ in range(n_trials))))

    async def _trial(self) -> TrialOutcome:
        trial = self.study.ask()
        run: Run | None = None
        try:
            params = {name: _text(value) for name, value in self.space(trial).items()}
            shown = ",".join(f"{k}={v}" for k, v in params.items())
            run = await self.session.submit(
                self.job, self.pool, env=params, label=f"{self.job.name}[#{trial.number} {shown}]"
            )
            trial.set_user_attr("swjob_run", run.run_id)
            pruned = await self._watch(trial, run)
            result = await run.wait()
        except (SubmitError, ValueError) as exc:
            return self._tell(trial, None, TrialState.FAIL, None, f"not submitted: {exc}")
        except BaseException:  # cancelled, or the session closing: the run ends with us
            if run is not None:
                with contextlib.suppress(SubmitError):
                    await run.stop("stopped: its Optuna trial was abandoned")
            self._tell(trial, run, TrialState.FAIL, None, "abandoned")
            raise
        if pruned is not None:
            return self._tell(trial, run, TrialState.PRUNED, None, pruned)
        if not result.ok:
            return self._tell(trial, run, TrialState.FAIL, None, result.reason)
        value, problem = self.objective.read(result.outputs_dir)
        if value is None:
            return self._tell(trial, run, TrialState.FAIL, None, f"objective: {problem}")
        return self._tell(trial, run, TrialState.COMPLETE, value, None)

    async def _watch(self, trial: optuna.Trial, run: Run) -> str | None:
        """Follow the run's output for `optuna-report` lines; stop it when the pruner says
        so. Why it was pruned, or None when it ran to its end."""
        async for event in run.events():
            if not isinstance(event, events.Log):
                continue
            for line in event.lines:
                found = REPORT.match(line.text)
                if found is None or not math.isfinite(value := _number(found[2])):
                    continue
                step = int(found[1])
                trial.report(value, step)
                if trial.should_prune():
                    reason = f"pruned by Optuna at step {step}"
                    with contextlib.suppress(SubmitError):  # it may have just ended
                        await run.stop(reason)
                    return reason
        return None

    def _tell(
        self,
        trial: optuna.Trial,
        run: Run | None,
        state: TrialState,
        value: float | None,
        reason: str | None,
    ) -> TrialOutcome:
        if reason is not None:
            trial.set_user_attr("swjob_reason", reason)
        self.study.tell(trial, value, state=None if value is not None else state)
        run_id = run.run_id if run is not None else None
        return TrialOutcome(trial.number, run_id, state, value, reason)


def optimize(
    study: optuna.Study,
    job: JobLike,
    space: Space,
    *,
    objective: str,
    n_trials: int,
    concurrency: int = 4,
    pool: str = "local",
    pools: Any = None,
    **session_options: Any,
) -> list[TrialOutcome]:
    """For scripts and notebooks: a Session for the trials, `n_trials` of them run
    `concurrency` at a time; the session's runs are stopped if it is interrupted."""
    with Session(pools, **session_options) as s:
        executor = Executor(s.async_session, study, job, space, objective=objective,
                            pool=pool, concurrency=concurrency)  # fmt: skip
        return s.call(executor.optimize(n_trials))


def _text(value: Any) -> str:
    """A parameter as the job's env sees it: Optuna's floats, ints, bools and choices."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan
