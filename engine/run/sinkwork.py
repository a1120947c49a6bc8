"""The run's sink, seen from its driver: hand the node its target, ask for work, hear back.

Once the node joined, it gets its SinkTarget (UseSink): from then on it can put the
outputs in the sink by itself — every `sync_every_s` while `run` runs, and before it
gives itself up when its operator is gone for good. The driver asks for the final upload
at collection and for a seed at a next attempt's workspace push (SinkWork) and waits for
the node's SinkDone, which arrives through the journal (replayed after a reconnect).
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent.protocol import SinkDone, SinkProgress, SinkWork, UseSink
from engine.report import events as ev
from engine.sink.place import SinkError, SinkPlace, place_for

if TYPE_CHECKING:
    from engine.run.orchestrator import RunDriver


class SinkLink:
    def __init__(self, driver: RunDriver) -> None:
        self._d = driver
        self.place: SinkPlace | None = place_for(driver.pool, driver.job.name, driver.view.run_id)
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[SinkDone]] = {}
        self._syncs = 0
        self._failing = False
        self.summary: dict[str, Any] = {}  # what run.json says of the sink
        self.moved: Callable[[], None] = lambda: None  # the collection's stall guard

    def secrets(self) -> list[str]:
        """The sink's credentials as this process has them: masked in all the run says."""
        if self.place is None:
            return []
        names = (self.place.key_env, self.place.secret_env, self.place.token_env)
        return [value for name in names if (value := os.environ.get(name))]

    def target(self, **fields: Any) -> Any:
        assert self.place is not None
        return self.place.target(**fields)

    async def hand_over(self) -> None:
        """Give the joined node its target (credentials masked everywhere downstream). An
        engine that adopted the run without the credentials in its environment says so and
        goes on: the node keeps the target its first engine gave it."""
        if self.place is None:
            return
        self.summary = {"place": self.place.record(), "url": self.place.url}
        self._d.remember(sink=self.place.record())
        every = self._d.pool.sync_interval()
        try:
            target = self.target(patterns=self._d.job.outputs, sync_every_s=every)
        except SinkError as exc:
            message = f"{exc}; the node keeps the sink it was given"
            self._d.publish(ev.Alert(run_id=self._d.view.run_id, message=message))
            return
        await self._d.session.send(UseSink(target=target))

    async def ask(self, op: str, seed_prefix: str | None = None) -> SinkDone:
        """Ask the node for sink work and wait for its answer."""
        work_id = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._waiting[work_id] = answer
        try:
            work = SinkWork(id=work_id, op=op, seed_prefix=seed_prefix)  # type: ignore[arg-type]
            await self._d.session.send(work)
            return await answer
        finally:
            self._waiting.pop(work_id, None)

    def on_progress(self, msg: SinkProgress) -> None:
        """The node's upload moved: the console shows it as the collection's progress."""
        if msg.id not in self._waiting:
            return  # a replay of an upload long answered
        self.moved()
        self._progress(msg.bytes_done, msg.bytes_total, msg.files_done, msg.files_total)

    def _progress(self, nbytes: int, total: int, files: int, of: int, done: bool = False) -> None:
        self._d.publish(
            ev.TransferProgress(
                run_id=self._d.view.run_id,
                direction=ev.TransferDirection.PULL,
                bytes_done=nbytes,
                bytes_total=total,
                files_done=files,
                files_total=of,
                current=None if done else "node → sink",
                done=done,
            )
        )

    def on_done(self, msg: SinkDone) -> None:
        if msg.op == "sync":
            self._synced(msg)
            return
        answer = self._waiting.get(msg.id)
        if answer is not None and not answer.done():
            answer.set_result(msg)
            if msg.op == "upload":
                self._progress(msg.bytes, msg.bytes, msg.files, msg.files, done=True)
        if msg.op in ("upload", "final"):
            self.summary.update(
                files=msg.files, bytes=msg.bytes, complete=msg.complete, error=msg.error
            )
            if msg.not_landed:
                redact = self._d.redact
                self.summary["not_landed"] = {
                    redact(p): redact(why) for p, why in msg.not_landed.items()
                }

    def _synced(self, msg: SinkDone) -> None:
        run_id = self._d.view.run_id
        if msg.error is not None:
            if not self._failing:
                message = f"sink sync failed ({msg.error}); the node tries again"
                self._d.publish(ev.Alert(run_id=run_id, message=self._d.redact(message)))
            self._failing = True
            return
        self._failing = False
        self._syncs += 1
        self._d.publish(
            ev.OutputsSynced(
                run_id=run_id,
                files=msg.sent_files,
                bytes=msg.sent_bytes,
                held=msg.files,
                syncs=self._syncs,
                sink=True,
            )
        )
