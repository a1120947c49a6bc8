"""Collection and resume through the sink, for a run whose pool has one.

At collection the node puts the outputs in the sink, and the laptop lands them from
there, each checked against the manifest — the same download `swjob pull` does later,
so what the laptop holds is provably what the sink holds. When the node's upload is not
whole (a store error, a file that would not go) the outputs come from the node instead,
as without a sink, and an alert says why. A next attempt's node seeds its workdir from
the previous attempt's sink state when the laptop's copy is older or absent (with a
sink, live syncs go to the sink, not to the laptop).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from agent.transfer.errors import TransferError
from engine.report import events as ev
from engine.run.attempts import Attempt
from engine.run.manifest import LandingFailed, PullResult
from engine.run.stall import Stalled, StallGuard
from engine.sink.place import SinkError

if TYPE_CHECKING:
    from pathlib import Path

    from engine.run.orchestrator import RunDriver


def _alert(d: RunDriver, message: str) -> None:
    d.publish(ev.Alert(run_id=d.view.run_id, message=d.redact(message)))


async def collect_through_sink(d: RunDriver) -> PullResult | None:
    """The outputs landed from the sink after the node's upload; None: take them from the
    node (the upload or the landing was not whole, said in an alert)."""
    guard = StallGuard(d.pool.collect_stall_s)
    d.sink.moved = guard.moved
    try:
        done = await guard.run(d.sink.ask("upload"))
    except Stalled as exc:
        _alert(d, f"sink upload stalled ({exc}): outputs collected from the node")
        return None
    if done.error is not None:
        _alert(d, f"sink upload failed ({done.error}): outputs collected from the node")
        return None
    if done.not_landed:
        first = next(iter(done.not_landed.items()))
        _alert(
            d,
            f"sink upload incomplete: {len(done.not_landed)} file(s) did not land "
            f"({first[0]!r}: {first[1]}): outputs collected from the node",
        )
        return None
    from engine.sink.land import land

    run_dir = d.view.run_dir
    try:
        result, _ = await land(d.sink.target(), run_dir / "outputs", run_dir, d.redact)
    except (SinkError, TransferError, LandingFailed) as exc:
        _alert(d, f"landing from the sink failed ({exc}): outputs collected from the node")
        return None
    if result.not_landed:
        _alert(d, "landing from the sink was not whole: outputs collected from the node")
        return None
    return result  # what the node left out (escaping links…) is said as a node pull's is


async def sink_seed_for(d: RunDriver, attempt: Attempt) -> str | None:
    """The previous attempt's prefix to seed from, when the sink holds a state of it newer
    than the laptop's copy (or the laptop has none); None: push the laptop's, if any."""
    place = d.sink.place
    if place is None or attempt.previous is None:
        return None
    from engine.sink.land import sink_manifest

    previous = place.sibling(attempt.previous)
    try:
        manifest = await sink_manifest(previous.target(), synced=True)
    except SinkError as exc:
        _alert(d, f"cannot resume from the sink ({exc}): using the laptop's copy")
        return None
    if manifest is None or not manifest.files:
        return None
    if attempt.carried is not None and _newest(attempt.carried) >= manifest.written_at:
        return None
    return previous.prefix


async def seed_from_sink(d: RunDriver, prefix: str) -> None:
    """Have the node fill its workdir from `prefix`; a failure is said, the run goes on."""
    done = await d.sink.ask("seed", seed_prefix=prefix)
    d.sink.summary["resumed_from"] = {"prefix": prefix, "files": done.files, "bytes": done.bytes}
    if done.error is not None or done.not_landed:
        why = done.error or f"{len(done.not_landed)} file(s) did not land"
        _alert(d, f"resume from the sink incomplete ({why})")


def _newest(root: Path) -> float:
    """The newest modification time (unix s) of anything under `root`."""
    newest = 0.0
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                newest = max(newest, os.lstat(os.path.join(folder, name)).st_mtime)
            except OSError:
                continue
    return newest
