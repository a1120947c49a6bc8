"""Run a sweep's variants on one engine: at most `concurrency` at once, one dollar cap over
all of them, optionally halting at the first failure.

A halt (the cap reached, fail-fast, `swjob stop --sweep`) stops the running runs through
the engine's own operator stop and starts no queued one; the sweep then waits for the
stopped runs to end, their nodes torn down. The engine does the running: this is only a
loop of submit and wait, so the CLI, the console and Python users share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

from engine.engine import Engine, SubmitError
from engine.jobs.jobspec import JobSpec
from engine.report.views import RunView
from engine.sweep import record as records
from engine.sweep.grid import Variant
from engine.sweep.metric import Metric
from engine.sweep.record import Member, SweepRecord

log = logging.getLogger("swjob.engine")

NOT_STARTED = "NOT STARTED"


@dataclass
class SweepRow:
    """One variant as the final table shows it."""

    label: str
    params: dict[str, str]
    view: RunView | None
    member: Member
    held: str | None  # why it never started

    @property
    def state(self) -> str:
        return self.view.state if self.view is not None else NOT_STARTED

    @property
    def reason(self) -> str | None:
        if self.view is None:
            return self.member.metric_problem or self.held
        return self.view.reason

    @property
    def completed(self) -> bool:
        return self.state == "COMPLETED"


class Sweep:
    def __init__(
        self,
        engine: Engine,
        job: JobSpec,
        variants: Sequence[Variant],
        *,
        pool: str = "local",
        concurrency: int = 4,
        max_dollars: float | None = None,
        fail_fast: bool = False,
        metric: Metric | None = None,
        minimize: bool = True,
        tick_s: float = 0.5,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.engine, self.job, self.pool = engine, job, pool
        self.variants = list(variants)
        self.fail_fast, self.metric, self.tick_s = fail_fast, metric, tick_s
        labels = [v.label(job.name) for v in self.variants]
        self.record = SweepRecord(
            sweep_id=records.new_sweep_id(),
            job_name=job.name,
            job_file=str(job.source),
            pool=pool,
            concurrency=concurrency,
            max_dollars=max_dollars,
            metric=str(metric) if metric else None,
            minimize=minimize,
            members=[
                Member(label=label, params=dict(v.params))
                for label, v in zip(labels, self.variants, strict=True)
            ],
        )
        self._running: dict[str, int] = {}  # run id → variant index

    @property
    def sweep_id(self) -> str:
        return self.record.sweep_id

    async def run(self) -> list[SweepRow]:
        """Run every variant (or until a halt); the rows in the variants' order."""
        records.save(self.record)
        queue = deque(range(len(self.variants)))
        waits: dict[asyncio.Future[RunView], str] = {}
        try:
            while True:
                await self._check()
                while queue and len(waits) < self.record.concurrency and not self.record.halted:
                    run_id = await self._start(queue.popleft())
                    if run_id is not None:
                        waits[asyncio.ensure_future(self.engine.wait(run_id))] = run_id
                if not waits:
                    break
                done, _ = await asyncio.wait(
                    waits, timeout=self.tick_s, return_when=asyncio.FIRST_COMPLETED
                )
                for future in done:
                    if (nxt := await self._ended(waits.pop(future), future.result())) is not None:
                        waits[asyncio.ensure_future(self.engine.wait(nxt))] = nxt
        finally:
            for future in waits:
                future.cancel()
            self.record.done = True
            records.save(self.record)
        rows = self.rows()
        self.engine.notify(self.pool, *self._summary(rows))
        return rows

    def _summary(self, rows: list[SweepRow]) -> tuple[str, str]:
        """The sweep's end in a notice: a count per state, its cost, why it halted."""
        states = Counter(row.state for row in rows)
        counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
        title = f"swjob: sweep {self.job.name} finished: {counts}"
        body = f"sweep {self.sweep_id}: {len(rows)} variants, ${self.spent():.2f} spent"
        if self.record.halted:
            body += f"; halted: {self.record.halted}"
        return title, body

    async def stop(self, reason: str = "stopped by operator") -> None:
        """Halt: stop the running runs, start no other."""
        await self._halt(reason)

    def rows(self) -> list[SweepRow]:
        rows = []
        for variant, member in zip(self.variants, self.record.members, strict=True):
            view = self.engine.run(member.run_id) if member.run_id else None
            held = None if view else (self.record.halted or "queued")
            rows.append(SweepRow(member.label, dict(variant.params), view, member, held))
        return rows

    def spent(self) -> float:
        """Dollars spent by every run of the sweep so far."""
        views = (self.engine.run(m.run_id) for m in self.record.members if m.run_id)
        return sum(v.cost_dollars or 0.0 for v in views if v is not None)

    async def _start(self, index: int) -> str | None:
        member = self.record.members[index]
        try:
            job = self.job.with_params(self.variants[index].params)
            run_id = await self.engine.submit(
                job, self.pool, label=member.label, sweep=self.sweep_id
            )
        except (SubmitError, ValueError) as exc:
            member.metric_problem = f"not submitted: {exc}"
            await self._halt(f"{member.label} could not be submitted")
            return None
        member.run_id = run_id
        self._running[run_id] = index
        records.save(self.record)
        return run_id

    async def _ended(self, run_id: str, view: RunView) -> str | None:
        """A run ended: its metric read, fail-fast applied; the id of its next attempt
        (engine/run/attempts.py) when the engine started one, to wait for instead."""
        index = self._running.pop(run_id)
        member = self.record.members[index]
        nxt = self.engine.successor(run_id)
        if nxt is not None and self.engine.running_run(nxt):
            member.run_id = nxt
            self._running[nxt] = index
            records.save(self.record)
            return nxt
        if self.metric is not None and view.state == "COMPLETED":
            member.metric, member.metric_problem = self.metric.read(view.run_dir / "outputs")
        records.save(self.record)
        if self.fail_fast and view.state != "COMPLETED":
            await self._halt(f"fail-fast: {member.label} {view.state}")
        return None

    async def _check(self) -> None:
        """Halt on the dollar cap or a stop asked from another process."""
        cap = self.record.max_dollars
        if cap is not None and (spent := self.spent()) >= cap:
            await self._halt(f"sweep cap ${cap:g} reached (${spent:.4f} spent)")
        elif records.stop_requested(self.sweep_id):
            await self._halt("stopped by operator (swjob stop --sweep)")

    async def _halt(self, reason: str) -> None:
        if self.record.halted is not None:
            return
        self.record.halted = reason
        records.save(self.record)
        log.info("sweep %s halted: %s", self.sweep_id, reason)
        for run_id in list(self._running):
            with contextlib.suppress(SubmitError):  # ended already, or tearing down
                await self.engine.stop(run_id, f"sweep halted: {reason}")
