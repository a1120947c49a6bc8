"""`swjob pull`: what it landed, said in a line or two; exit 1 unless every output of a
complete manifest landed verified."""

from __future__ import annotations

import sys
from pathlib import Path

from agent.transfer.errors import TransferError
from engine.run.manifest import LandingFailed
from engine.sink.place import SinkError
from engine.sink.pull import pull


async def pull_and_say(
    run_ref: str, to: Path | None, endpoint: str | None, region: str | None
) -> int:
    try:
        pulled = await pull(run_ref, to, endpoint, region)
    except (SinkError, TransferError, LandingFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    result = pulled.result
    landed = [e for e in result.files if e.verified]
    print(
        f"{len(landed)} file(s), {result.bytes} bytes from {pulled.url} into {pulled.dest}, "
        "each verified against the run's manifest (SHA-256)"
    )
    for entry in result.not_landed:
        print(f"error: {entry.path!r} did not land: {entry.reason}", file=sys.stderr)
    if not pulled.manifest.complete:
        print(
            "warning: not a complete set: the node's last upload did not put every output "
            "in the sink, or (a lost or preempted node) only its last live sync is there",
            file=sys.stderr,
        )
    return 0 if pulled.manifest.complete and not result.not_landed else 1
