"""The agent's hand on the run's sink: the target the orchestrator gave, the live sync,
the work it asks for, and the last upload before the node gives itself up.

Every answer goes into the journal (SinkDone), so an orchestrator that reconnects — or
the one that adopts the run — hears it. The credentials stay in this process's memory:
never on disk, never in a step's environment.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.protocol import SinkDone, SinkProgress, SinkTarget, SinkWork
from agent.sink.store import describe, open_store

if TYPE_CHECKING:
    from agent.sink.upload import Meter, Uploader

log = logging.getLogger("swjob.agent")
ASK = "@sink:"
"""A job's env value `@sink:<field>` asks for one of the sink's credentials by name (the
job writes to the bucket itself): the only way they reach a job's environment."""
FIELDS = ("access_key_id", "secret_access_key", "session_token")
PROGRESS_EVERY_S = 0.5
NO_CLIENT = (
    "the run's pool has a sink, but obstore is not installed on this node "
    "(pip install obstore): its outputs go to the operator only"
)
"""Said once, in the agent's log, and as the answer to every piece of sink work: a node
installs obstore only for a pool with a sink (agent/closure.py)."""
LAST_UPLOAD_S = 3600.0
"""The most an orphaned node spends on its last upload: a store that hangs must not keep
a node nobody owns billing for ever."""
AT_CAP_UPLOAD_S = 10.0
"""The most a node at its run's cap spends on its last upload: the cap is money, so the
node stops billing within its job's stop grace plus this. What the live syncs put is
there already; a big file cut short resumes from its parts (agent/sink/parts.py)."""
BEFORE_PARK_UPLOAD_S = 60.0
"""The most a node kept warm spends, once parked (its run's session over: agent/warm.py),
putting outputs its collection's upload did not (the laptop took them from the node): then
nothing is left unsaved when it expires, and a claim waits at most this long."""


class SinkHand:
    def __init__(
        self,
        workdir: Path,
        emit: Callable[[SinkDone | SinkProgress], object],
        spawn: Callable[[Any], None],
    ) -> None:
        self._workdir = workdir
        self._emit = emit
        self._spawn = spawn
        self._uploader: Uploader | None = None
        self._unusable: str | None = None  # why a sink it was given cannot be used
        self.whole = False  # the last final upload's manifest vouched for every output

    def use(self, target: SinkTarget, busy: Callable[[], bool]) -> None:
        """Take the run's target (once: a rejoin sends it again); start the live sync."""
        if self._uploader is not None:
            return
        try:
            from agent.sink.upload import Uploader, sync_every  # a run with a sink: obstore now
        except ImportError:
            self._unusable = NO_CLIENT
            log.error("%s", NO_CLIENT)
            return
        self._uploader = Uploader(target, self._workdir)
        if target.sync_every_s:
            self._spawn(sync_every(self._uploader, target.sync_every_s, busy, self._emit))

    def job_env(self, env: dict[str, str]) -> dict[str, str]:
        """The step's env with each `@sink:<field>` the job asked for filled in (the engine
        refused, at submit, a job that asks without a sink or for an unknown field)."""
        target = self._uploader.target if self._uploader else None

        def filled(value: str) -> str:
            if not value.startswith(ASK):
                return value
            return (getattr(target, value[len(ASK) :], None) or "") if target else ""

        return {name: filled(value) for name, value in env.items()}

    def work(self, msg: SinkWork) -> None:
        self._spawn(self._answer(msg))

    async def _answer(self, msg: SinkWork) -> None:
        try:
            if self._uploader is None:
                raise RuntimeError(self._unusable or "no sink was given to this node")
            if msg.op == "upload":
                done = await self._upload(self._uploader, msg.id)
            else:
                done = await self._seed(self._uploader.target, msg)
        except Exception as exc:
            bucket = self._uploader.target.bucket if self._uploader else ""
            done = SinkDone(seq=0, op=msg.op, id=msg.id, error=describe(exc, bucket))
        self._emit(done)

    async def _upload(self, uploader: Uploader, work_id: int) -> SinkDone:
        """The final upload, its progress said while it goes (only when it moved)."""
        ticker = asyncio.create_task(self._tell_progress(uploader, work_id))
        try:
            done = (await uploader.upload(final=True)).event("upload", work_id)
        finally:
            ticker.cancel()
        self.whole = done.complete
        return done

    async def _tell_progress(self, uploader: Uploader, work_id: int) -> None:
        from agent.sink.upload import Meter

        said: Meter | None = None
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            now = Meter(**vars(uploader.meter))
            if now != said:
                self._emit(SinkProgress(seq=0, id=work_id, **vars(now)))
                said = now

    async def _seed(self, target: SinkTarget, msg: SinkWork) -> SinkDone:
        """Fill the workdir from an earlier run's outputs (its manifest, else its last sync)."""
        from agent.sink.download import download, read_manifest

        store = open_store(target, prefix=msg.seed_prefix)
        manifest = await read_manifest(store, synced=True)
        if manifest is None:
            raise RuntimeError(f"nothing to resume from at {msg.seed_prefix}")
        failed = await download(store, manifest, self._workdir, target.bucket)
        landed = {p: s for p, (s, _) in manifest.files.items() if p not in failed}
        return SinkDone(
            seq=0,
            op="seed",
            id=msg.id,
            files=len(landed),
            bytes=sum(landed.values()),
            not_landed=failed,
            complete=not failed,
        )

    async def save_before_leaving(self, within: float = LAST_UPLOAD_S) -> str | None:
        """The last upload of a node leaving on its own, given at most `within` seconds;
        what to say of it (None: no sink). Every way a node ends itself calls this: its
        orphan timeout, its cap, a park that follows a collection the sink missed."""
        if self._uploader is None:
            return self._unusable and f"outputs not saved to the sink: {self._unusable}"
        try:
            async with asyncio.timeout(within):
                report = await self._uploader.upload(final=True)
        except TimeoutError:
            return f"outputs not all saved to the sink before leaving: not done in {within:g} s"
        except Exception as exc:
            return f"outputs not saved to the sink before leaving: {describe(exc)}"
        event = report.event("final")
        self.whole = event.complete
        self._emit(event)
        m = report.manifest
        lost = f", {len(m.not_landed)} did not land" if m.not_landed else ""
        unsaid = f"; {report.error}" if report.error else ""
        return f"outputs saved to the sink before leaving: {len(m.files)} files{lost}{unsaid}"
