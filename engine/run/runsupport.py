"""The driver's helper for moving bytes (workspace push, output pull); money (cost meter
and caps) lives in engine/run/costmeter.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent.inflight import IN_FLIGHT_EXCLUDES
from agent.transfer import Progress
from engine.report import events as ev
from engine.run import fsm
from engine.run.control import NodeGone
from engine.run.livesync import LiveSync
from engine.run.sinkcollect import collect_through_sink, seed_from_sink, sink_seed_for
from engine.run.stall import Stalled, StallGuard
from engine.run.transfer import (
    LandingFailed,
    ManifestNotWritten,
    PullResult,
    PushResult,
    Stopped,
    TransferError,
    pull_outputs,
    push_workspace,
)
from engine.state.paths import landing_excludes

if TYPE_CHECKING:
    from engine.run.orchestrator import RunDriver


def push_summary(result: PushResult) -> dict[str, Any]:
    """run.json's record of one push: what went, and what a warm node already held."""
    return {
        "files": result.files,
        "bytes": result.bytes,
        "sent_bytes": result.bytes - result.reused_bytes - result.resumed_bytes,
        "reused_files": result.reused_files,
        "reused_bytes": result.reused_bytes,
        "seconds": round(result.seconds, 3),
    }


class Transfers:
    def __init__(self, driver: RunDriver) -> None:
        self._d = driver
        self.live = LiveSync(driver)
        self._stopped = Stopped()

    def cut_short(self, why: str) -> None:
        """The collection under way is about to be stopped (the operator, a cap, the node
        lost): every output that does not land is recorded with `why`."""
        self._stopped.why = why

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
                    current=self._d.redact(p.current) if p.current else p.current,
                    rate_bps=p.rate_bps,
                    eta_s=p.eta_s,
                    done=p.done,
                )
            )

        return report

    async def push(self) -> None:
        """The job's workspace (never the runs landing in it), then (a next attempt) the
        previous attempt's outputs over it, where the job wrote them."""
        workspace, attempt = self._d.job.workspace, self._d.attempt
        trees = []
        if workspace is not None:
            runs_dir = self._d.view.run_dir.parent.parent
            landing = landing_excludes(workspace.workdir, runs_dir)
            trees.append((workspace.workdir, workspace.exclude + landing))
        seed = await sink_seed_for(self._d, attempt) if attempt is not None else None
        if attempt is not None and attempt.carried is not None and seed is None:
            trees.append((attempt.carried, IN_FLIGHT_EXCLUDES))  # not a cut pull's
        refused: list[str] = []
        try:
            for root, exclude in trees:
                progress = self._progress(ev.TransferDirection.PUSH)
                delta = self._d.on_warm_node and root == trees[0][0]
                result = await push_workspace(self._d.session, root, exclude, progress, delta=delta)
                refused += result.refused
                self._d.pushed.append(push_summary(result))
            if seed is not None:
                await seed_from_sink(self._d, seed)
        except TransferError as exc:
            self._d.post(fsm.NodeFault(self._d.redact(f"transfer failed: {exc}")))
        except NodeGone as exc:
            self._d.post(fsm.NodeLost(str(exc)))
        else:
            self._record_refused(refused)
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

        With a sink, the node puts them there first and they land from it when its upload
        is whole (engine/run/sinkcollect.py); else, or when that fails, from the node.
        A collection that moves no byte for the pool's `collect_stall_s` gives up: the run
        keeps its verdict (the exit code decided it) and an alert says what was not collected."""
        await self.live.stop()  # the final pull lands every output anew
        if self._d.sink.place is not None:
            try:
                landed = await collect_through_sink(self._d)
            except NodeGone as exc:
                if not best_effort:
                    self._d.post(fsm.NodeFault(self._d.redact(f"transfer failed: {exc}")))
                    return {}
                return self._not_collected(str(exc))
            if landed is not None:
                return self._collected(landed)
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
                    stopped=self._stopped,
                )
            )
        except asyncio.CancelledError:
            if self._stopped.result is not None and self._stopped.why is not None:
                self._d.outputs = self._cut(self._stopped.result, self._stopped.why)
            raise
        except Stalled as exc:
            return self._not_collected(f"collection stalled: {exc}")
        except ManifestNotWritten as exc:
            return self._without_manifest(exc.result, str(exc))
        except LandingFailed as exc:  # the operator's disk, not the node: the verdict stands
            return self._not_collected(str(exc))
        except (TransferError, NodeGone) as exc:
            if not best_effort:
                self._d.post(fsm.NodeFault(self._d.redact(f"transfer failed: {exc}")))
                return {}
            return self._not_collected(str(exc))
        return self._collected(result)

    def _collected(self, result: PullResult) -> dict[str, Any]:
        summary: dict[str, Any] = {"files": len(result.files), "bytes": result.bytes}
        redact = self._d.redact
        if result.not_landed:
            summary["not_landed"] = {
                redact(e.path): e.reason and redact(e.reason) for e in result.not_landed
            }
        if result.not_landed or result.refused:
            summary["refused"] = result.refused
            self._alert_incomplete(result)
        self._d.post(fsm.OutputsCollected())
        # a declared output that matched nothing may hold a secret: shown masked, as in
        # manifest.json
        return {"missing": [redact(m) for m in result.missing], "summary": summary}

    def _cut(self, result: PullResult, why: str) -> dict[str, Any]:
        """What run.json records of a collection cut short: every output that did not land
        (each with its reason, `why` where it had none of its own), and the note."""
        redact = self._d.redact
        not_landed = {redact(e.path): e.reason and redact(e.reason) for e in result.not_landed}
        summary = {"files": len(result.files), "bytes": result.bytes, "not_landed": not_landed}
        missing = [redact(m) for m in result.missing] + list(not_landed)
        note = redact(f"output collection cut short: {why}")
        return {"missing": missing, "summary": summary | {"refused": result.refused}, "note": note}

    def _without_manifest(self, result: PullResult, why: str) -> dict[str, Any]:
        """Pulled, but manifest.json could not be written: the outputs that landed whole
        (each verified against its SHA-256 as it landed) are collected, named in the note
        and, with their digests, in run.json — saying none were collected listed them all
        as missing. Those that did not land are missing, as in an incomplete pull."""
        verified = {e.path: e.sha256 for e in result.files if e.verified}
        if not verified:
            return self._not_collected(why)
        redact = self._d.redact
        collected = self._collected(result)
        collected["summary"]["verified"] = {redact(path): sha for path, sha in verified.items()}
        collected["missing"] += [redact(e.path) for e in result.not_landed]
        names = list(verified)
        shown = ", ".join(names[:5]) + (f", … {len(names) - 5} more" if len(names) > 5 else "")
        note = redact(
            f"outputs landed without a manifest ({why}): {len(names)} of {len(result.files)} "
            f"files landed whole, verified by SHA-256: {shown} (listed in run.json)"
        )
        self._d.publish(ev.Alert(run_id=self._d.view.run_id, message=note))
        return {**collected, "note": note}

    def _alert_incomplete(self, result: PullResult) -> None:
        """Loud, because the run may still be COMPLETED (the exit code decides): say what did
        not land and why; manifest.json and run.json list every one."""
        lost = [f"{e.path!r} {e.reason}" for e in result.not_landed] + result.refused
        total = len(result.files) + len(result.refused)
        shown = "; ".join(lost[:3]) + (f"; … {len(lost) - 3} more" if len(lost) > 3 else "")
        message = f"outputs incomplete: {len(lost)} of {total} files did not land: {shown}"
        self._d.publish(ev.Alert(run_id=self._d.view.run_id, message=self._d.redact(message)))

    def _not_collected(self, why: str) -> dict[str, Any]:
        message = self._d.redact(f"outputs not collected: {why}")
        self._d.publish(ev.Alert(run_id=self._d.view.run_id, message=message))
        self._d.post(fsm.OutputsCollected())
        return {"missing": [self._d.redact(m) for m in self._d.job.outputs], "note": message}
