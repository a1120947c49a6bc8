"""`swjob pull RUN [--to DIR]`: a run's outputs from its sink, at any time, from any
machine with the credentials — by run id (this machine's index says where its sink is)
or by the run's s3:// URL — each file checked against the manifest the node wrote last."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.sink.layout import Manifest, parse_url
from engine.run.manifest import PullResult
from engine.sink.land import land
from engine.sink.place import SinkError, SinkPlace
from engine.state.store import Store


@dataclass(frozen=True)
class Pulled:
    url: str
    dest: Path
    result: PullResult
    manifest: Manifest


def place_of(
    run_ref: str, endpoint: str | None, region: str | None
) -> tuple[SinkPlace, Path, Path | None]:
    """The run's place in its sink, where its outputs land by default and where the
    laptop's manifest.json goes: its landing dir (outputs/) when this machine knows the
    run, else ./<run id> (and no manifest.json beside: the sink's is the record)."""
    if run_ref.startswith("s3://"):
        try:
            bucket, prefix = parse_url(run_ref)
        except ValueError as exc:
            raise SinkError(str(exc)) from None
        place = SinkPlace(bucket=bucket, prefix=prefix, endpoint=endpoint, region=region)
        return place, Path.cwd() / (prefix.rsplit("/", 1)[-1] or bucket), None
    store = Store()
    try:
        view = store.find(run_ref) or store.kept_view(run_ref)
        recovery = store.recovery(view.run_id) if view else None
    finally:
        store.close()
    if view is None:
        raise SinkError(f"no run {run_ref!r} here (give its s3:// URL to pull it from anywhere)")
    place = SinkPlace.from_record((recovery or {}).get("sink"))
    if place is None:
        raise SinkError(f"run {view.run_id} has no sink: its outputs are only in {view.run_dir}")
    if endpoint or region:
        place = SinkPlace(**{**place.record(), "endpoint": endpoint or place.endpoint,
                             "region": region or place.region})  # fmt: skip
    return place, view.run_dir / "outputs", view.run_dir


async def pull(
    run_ref: str, to: Path | None = None, endpoint: str | None = None, region: str | None = None
) -> Pulled:
    """Download the run's outputs into `to` (default: see place_of), verified."""
    place, default, manifest_dir = place_of(run_ref, endpoint, region)
    dest = (to or default).absolute()
    result, manifest = await land(place.target(), dest, None if to else manifest_dir, synced=True)
    return Pulled(place.url, dest, result, manifest)
