"""Outputs landed from the sink on the operator's disk, each checked against the manifest
the node wrote last — the collection's path when the node's upload is whole, and
`swjob pull`'s at any time later."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agent.protocol import SinkTarget
from agent.sink.download import download, read_manifest
from agent.sink.layout import Manifest
from agent.sink.store import describe, open_store
from engine.run.manifest import ManifestEntry, PullResult, landing, write_manifest
from engine.sink.place import SinkError


async def sink_manifest(target: SinkTarget, synced: bool = False) -> Manifest | None:
    """The run's manifest in the sink (or its last sync's, with `synced`); None: none yet."""
    try:
        return await read_manifest(open_store(target), synced)
    except Exception as exc:
        raise SinkError(f"sink s3://{target.bucket}/{target.prefix}: {describe(exc)}") from None


async def land(
    target: SinkTarget,
    outputs: Path,
    manifest_dir: Path | None,
    redact: Callable[[str], str] = str,
    synced: bool = False,
) -> tuple[PullResult, Manifest]:
    """Download the run's outputs into `outputs`, verified; write manifest.json (the
    laptop's, in the node pull's shape) into `manifest_dir` when given. With `synced`, a
    run whose node never finished an upload (lost, preempted) gives its last live sync's
    state (never complete). SinkError when the sink holds neither."""
    manifest = await sink_manifest(target, synced)
    if manifest is None:
        where = f"s3://{target.bucket}/{target.prefix}"
        raise SinkError(f"no manifest.json at {where}: no upload of that run finished there")
    with landing(outputs):
        outputs.mkdir(parents=True, exist_ok=True)
    failed = await download(open_store(target), manifest, outputs, target.bucket)
    files = [
        ManifestEntry(path, size, 0o644, None, False, redact(failed[path]))
        if path in failed
        else ManifestEntry(path, size, 0o644, sha, True)
        for path, (size, sha) in sorted(manifest.files.items())
    ]
    files += [
        ManifestEntry(path, 0, 0o644, None, False, redact(f"not in the sink: {why}"))
        for path, why in sorted(manifest.not_landed.items())
    ]
    landed = sum(e.size for e in files if e.verified)
    refused = [redact(line) for line in manifest.refused]
    result = PullResult(files, [redact(m) for m in manifest.missing], landed, refused)
    if manifest_dir is not None:
        complete = manifest.complete and not failed
        write_manifest(manifest_dir, result, redact, complete=complete)
    return result, manifest
