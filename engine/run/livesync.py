"""Live output sync: while `run` runs, pull the declared outputs that changed.

A node can vanish mid-run (an interruptible instance taken back, a host that dies), and
then the final pull has nothing to pull from: whatever the job wrote is lost with the
node. So every `sync_every_s` the engine lists the declared outputs on the node and
pulls the files whose size or modification time changed since the last sync that landed
them, into the run's landing dir (`outputs/`), verified like the final pull (SHA-256,
atomic rename, torn files refused), after removing what the job deleted or replaced by
another kind of thing since (engine/run/reconcile.py): `outputs/` is the last synced
state. It runs beside the job, never pausing it; when nothing changed it costs one
listing and moves no file. A failed sync is said once and tried again at the next
interval. Syncs stop before the final pull starts, which then lands every output again
at its final version (and writes manifest.json).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from agent.transfer.progress import ProgressMeter
from agent.transfer.receiver import Receiver
from agent.transfer.schedule import schedule
from agent.transfer.walk import Entry
from engine.report import events as ev
from engine.run.reconcile import reconcile
from engine.run.transfer import XferLink, _list, _pull_stream

if TYPE_CHECKING:
    from engine.run.orchestrator import RunDriver

Seen = dict[str, tuple[int, int]]  # path → (size, mtime_ns) of the version last landed


async def sync_changed(
    link: XferLink, patterns: list[str], landing: Path, seen: Seen
) -> list[Entry]:
    """Pull the outputs that changed since `seen` into `landing`; returns the files that
    landed verified (and records them in `seen`). Nothing changed: nothing is pulled."""
    listing = await _list(link, patterns)
    files = [e for e in listing.entries if e.kind == "file"]
    listed = {e.path for e in files}
    for path in [p for p in seen if p not in listed]:  # deleted, or now a directory
        del seen[path]
    await asyncio.to_thread(reconcile, landing, listing.entries)
    changed = [e for e in files if seen.get(e.path) != (e.size, e.mtime_ns)]
    if not changed:
        return []
    unchanged = {e.path for e in files} - {e.path for e in changed}
    landing.mkdir(parents=True, exist_ok=True)
    receiver = Receiver(landing, hash_chunked=True, per_file=True, staged=True)
    meter = ProgressMeter(lambda _p: None, sum(e.size for e in changed), len(changed))
    plan = schedule(listing.entries, unchanged)
    try:
        async with asyncio.TaskGroup() as group:
            for items in plan.streams:
                if items:
                    group.create_task(_pull_stream(link, items, receiver, meter))
    except BaseException:
        receiver.close(discard_partials=True)
        raise
    receiver.close()
    landed = [e for e in changed if e.path in receiver.verified]
    seen.update((e.path, (e.size, e.mtime_ns)) for e in landed)
    return landed


class LiveSync:
    """The run's sync loop: started with the `run` step, stopped before collection."""

    def __init__(self, driver: RunDriver) -> None:
        self._d = driver
        self._seen: Seen = {}
        self._task: asyncio.Task[object] | None = None
        self._syncs = 0
        self._failing = False
        self.checks = 0  # syncs done, whether or not anything had changed
        self._over = False  # collection began: no sync may start again

    def start(self) -> None:
        """Start syncing (the run step runs, or was resumed after an operator restart)."""
        every = self._d.pool.sync_interval()
        if every is None or not self._d.job.outputs or self._task is not None or self._over:
            return
        if self._d.sink.place is not None:
            return  # the node syncs to the sink itself (agent/sinkhand.py)
        self._task = self._d.start_work(self._loop(every))

    async def stop(self) -> None:
        """Cancel the loop and wait for it: a sync cut short keeps what already landed."""
        self._over = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            await self._sync_once(every)
            self.checks += 1

    @property
    def running(self) -> bool:
        return self._task is not None

    async def _sync_once(self, every: float) -> None:
        run_id = self._d.view.run_id
        landing = self._d.view.run_dir / "outputs"
        try:
            landed = await sync_changed(self._d.session, self._d.job.outputs, landing, self._seen)
        except Exception as exc:  # transfer, connection or wire trouble: try again later
            if not self._failing:
                message = f"output sync failed ({exc}); trying again every {every:g} s"
                self._d.publish(ev.Alert(run_id=run_id, message=self._d.redact(message)))
            self._failing = True
            return
        self._failing = False
        if not landed:
            return
        self._syncs += 1
        shown = [self._d.redact(e.path) for e in landed[: ev.SYNC_PATHS_SHOWN]]
        self._d.publish(
            ev.OutputsSynced(
                run_id=run_id,
                files=len(landed),
                bytes=sum(e.size for e in landed),
                paths=shown,
                held=len(self._seen),
                syncs=self._syncs,
            )
        )
