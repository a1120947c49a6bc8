"""The driver's helpers for the two long-running concerns of a run besides its steps:
moving bytes (workspace push, output pull) and money (cost meter and caps)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent.transfer import Progress
from engine.report import events as ev
from engine.run import fsm
from engine.run.control import NodeGone
from engine.run.runrecord import cost_by_phase
from engine.run.stall import Stalled, StallGuard
from engine.run.transfer import TransferError, pull_outputs, push_workspace

if TYPE_CHECKING:
    from engine.run.orchestrator import RunDriver

COST_EVENT_EVERY_S = 5.0


class Transfers:
    def __init__(self, driver: RunDriver) -> None:
        self._d = driver

    def _progress(self, direction: ev.TransferDirection) -> Callable[[Progress], None]:
        def report(p: Progress) -> None:
            self._d.publish(
                ev.TransferProgress(
                    run_id=self._d.view.run_id,
                    direction=direction,
                    bytes_done=p.bytes_done,
                    bytes_total=p.bytes_total,
                    files_done=p.files_done,
                    files_total=p.files_total,
                    current=p.current,
                    rate_bps=p.rate_bps,
                    eta_s=p.eta_s,
                    done=p.done,
                )
            )

        return report

    async def push(self) -> None:
        workspace = self._d.job.workspace
        assert workspace is not None
        try:
            result = await push_workspace(
                self._d.session,
                workspace.workdir,
                workspace.exclude,
                self._progress(ev.TransferDirection.PUSH),
            )
        except TransferError as exc:
            self._d.post(fsm.NodeFault(self._d.redact(f"transfer failed: {exc}")))
        except NodeGone as exc:
            self._d.post(fsm.NodeLost(str(exc)))
        else:
            self._record_refused(result.refused)
            self._d.post(fsm.WorkspaceMaterialized())

    def _record_refused(self, refused: list[str]) -> None:
        """What the push left out (links escaping the workspace, special files): in run.json
        and as an alert, so nothing is skipped silently."""
        if not refused:
            return
        lines = [self._d.redact(line) for line in refused]
        self._d.workspace_refused = lines
        shown = "; ".join(lines[:3]) + (f"; … {len(lines) - 3} more" if len(lines) > 3 else "")
        message = f"workspace push left out {len(lines)} path(s): {shown}"
        self._d.publish(ev.Alert(run_id=self._d.view.run_id, message=message))

    async def pull(self, best_effort: bool) -> dict[str, Any]:
        """Collect the declared outputs; returns what run.json records about them.

        A collection that moves no byte for the pool's `collect_stall_s` gives up: the run
        keeps its verdict (the exit code decided it) and an alert says what was not collected."""
        guard = StallGuard(self._d.pool.collect_stall_s)
        report = self._progress(ev.TransferDirection.PULL)

        def progress(p: Progress) -> None:
            guard.moved()
            report(p)

        try:
            result = await guard.run(
                pull_outputs(
                    self._d.session,
                    self._d.job.outputs,
                    self._d.view.run_dir,
                    progress,
                    redact=self._d.redact,
                )
            )
        except Stalled as exc:
            return self._not_collected(f"collection stalled: {exc}")
        except (TransferError, NodeGone) as exc:
            if not best_effort:
                self._d.post(fsm.NodeFault(self._d.redact(f"transfer failed: {exc}")))
                return {}
            return self._not_collected(str(exc))
        self._d.post(fsm.OutputsCollected())
        summary = {"files": len(result.files), "bytes": result.bytes}
        return {"missing": list(result.missing), "summary": summary}

    def _not_collected(self, why: str) -> dict[str, Any]:
        message = self._d.redact(f"outputs not collected: {why}")
        self._d.publish(ev.Alert(run_id=self._d.view.run_id, message=message))
        self._d.post(fsm.OutputsCollected())
        return {"missing": list(self._d.job.outputs)}


class CostMeter:
    """Price × time alive, split by phase, published every few seconds; enforces the pool's caps
    by stopping the run like an operator stop, with a reason that names the cap."""

    def __init__(self, driver: RunDriver) -> None:
        self._d = driver
        self._price: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._started = 0.0

    def start(self, price_per_hour: float | None) -> None:
        caps = self._d.pool.caps
        self._price = price_per_hour
        self._started = time.monotonic()
        if price_per_hour is not None or caps.max_hours is not None:
            self._task = asyncio.create_task(self._tick())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _dollars(self) -> tuple[float, dict[str, float]]:
        assert self._price is not None
        by_phase = cost_by_phase(self._price, self._d.clock.durations())
        return sum(by_phase.values()), by_phase

    def publish_final(self) -> None:
        if self._price is not None:
            self._publish()

    def _publish(self) -> float:
        dollars, by_phase = self._dollars()
        run_id = self._d.view.run_id
        self._d.publish(ev.Cost(run_id=run_id, dollars=dollars, by_phase=by_phase))
        return dollars

    async def _tick(self) -> None:
        """Check the caps every second for as long as the run lives: a stop posted in a phase
        that cannot act on it is ignored, so the next second's check posts it again."""
        last_event = 0.0
        with contextlib.suppress(asyncio.CancelledError):
            while True:
                await asyncio.sleep(1.0)
                if self._price is not None and time.monotonic() - last_event >= COST_EVENT_EVERY_S:
                    last_event = time.monotonic()
                    self._publish()
                reason = self._cap_reached()
                if reason is not None:
                    self._d.post(fsm.OperatorStop(reason))

    def _cap_reached(self) -> str | None:
        caps = self._d.pool.caps
        hours = (time.monotonic() - self._started) / 3600
        if caps.max_hours is not None and hours >= caps.max_hours:
            return f"cap reached: max_hours {caps.max_hours:g}"
        if self._price is None or caps.max_dollars is None:
            return None
        dollars = self._dollars()[0]
        if dollars < caps.max_dollars:
            return None
        return f"cap reached: max_dollars ${caps.max_dollars:g} (spent ${dollars:.2f})"
