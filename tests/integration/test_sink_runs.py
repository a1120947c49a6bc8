"""Runs on a pool with a sink (a real SeaweedFS S3 server, real agents, real iroh): the
node puts the outputs in the sink and the laptop lands them from there, verified; an
upload the sink refuses is said and the node delivers; a bad sink is refused at submit,
before any node; a preempted Vast node's next attempt resumes from the sink; the sink's
keys are in no record."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from agent.sink.download import read_manifest
from agent.sink.store import open_store
from engine.engine import SubmitError
from engine.report import events as ev
from engine.sink.pull import pull
from tests.standin.server import StandIn
from tests.support.engines import EngineFactory, engine_with
from tests.support.jobs import RESUMING
from tests.support.runs import events, run_json
from tests.support.s3 import Bucket
from tests.support.tap import Tap
from tests.support.vast import gpu_pool

pytestmark = pytest.mark.timeout(120)


def sink_settings(s3: Bucket) -> dict[str, str]:
    return {"sink": s3.url, "sink_endpoint": s3.server.endpoint}


def holding(root: Path, secret: str) -> list[Path]:
    """Every file under `root` whose bytes hold `secret`."""
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


async def test_outputs_go_to_the_sink_and_land_from_it(
    tmp_path: Path, make_job, s3: Bucket
) -> None:
    job = make_job(
        run="mkdir -p out && echo 42 > out/answer.txt && env | grep -v ^ASKED= > out/env.txt"
        ' && printf %s "$ASKED" | sha256sum > out/asked.txt && echo "key: $ASKED"',
        outputs=["out/"],
        name="answer",
        env={"ASKED": "@sink:secret_access_key"},  # asked for by name: given, masked
    )
    async with engine_with(tmp_path / "runs", **sink_settings(s3)) as engine:
        run_id = await engine.submit(job, "local")
        view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason
    assert (view.run_dir / "outputs/out/answer.txt").read_text() == "42\n"
    summary = run_json(view.run_dir)
    assert summary["sink"]["url"] == f"s3://{s3.name}/results/answer/{run_id}"
    assert summary["sink"]["complete"] is True and summary["sink"]["files"] == 3
    target = s3.target(prefix=f"results/answer/{run_id}")
    manifest = await read_manifest(open_store(target))
    assert manifest is not None and manifest.complete
    assert set(manifest.files) == {"out/answer.txt", "out/env.txt", "out/asked.txt"}
    job_env = (view.run_dir / "outputs/out/env.txt").read_text()
    assert "AWS_" not in job_env  # the job's env holds no key it did not ask for
    asked = (view.run_dir / "outputs/out/asked.txt").read_text().split()[0]
    assert asked == hashlib.sha256(s3.server.secret_key.encode()).hexdigest()
    assert "key: " in (view.run_dir / "logs/run.log").read_text()
    assert holding(tmp_path, s3.server.secret_key) == []
    alerts = [e.message for e in events(view.run_dir) if isinstance(e, ev.Alert)]
    assert alerts == []  # landed from the sink, not from the node
    [shown] = [e for e in events(view.run_dir) if isinstance(e, ev.TransferProgress) and e.done]
    assert (shown.direction, shown.files_done, shown.files_total) == ("pull", 3, 3)


async def test_an_upload_the_sink_refuses_is_said_and_the_node_delivers(
    tmp_path: Path, make_job, s3: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys that may list but not write pass the check at submit; every put is refused,
    retried, and named with its reason; the outputs come from the node, the run keeps its
    exit code's verdict."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.server.reader_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.server.reader_secret)
    job = make_job(run="echo 42 > answer.txt", outputs=["answer.txt"], name="answer")
    async with engine_with(tmp_path / "runs", **sink_settings(s3)) as engine:
        run_id = await engine.submit(job, "local")
        view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason
    assert (view.run_dir / "outputs/answer.txt").read_text() == "42\n"
    sink = run_json(view.run_dir)["sink"]
    assert sink["complete"] is False and sink["not_landed"]["answer.txt"].startswith(
        "access denied"
    )
    [alert] = [e.message for e in events(view.run_dir) if isinstance(e, ev.Alert)]
    assert alert.startswith("sink upload failed (manifest.json not written: access denied")
    assert alert.endswith("outputs collected from the node")


async def test_an_engine_without_the_keys_says_so_and_the_run_goes_on(
    tmp_path: Path, make_job, s3: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an adopter without the keys in its environment meets: it cannot hand the node
    the sink; it says so, and the outputs come from the node."""
    job = make_job(run="echo 42 > answer.txt", outputs=["answer.txt"], name="answer")
    async with engine_with(tmp_path / "runs", **sink_settings(s3)) as engine:
        run_id = await engine.submit(job, "local")  # checked with the keys
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")  # gone before the node joins
        view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason
    assert (view.run_dir / "outputs/answer.txt").read_text() == "42\n"
    alerts = [e.message for e in events(view.run_dir) if isinstance(e, ev.Alert)]
    assert alerts[0].endswith("set AWS_SECRET_ACCESS_KEY in the environment (the sink's "
                              "credentials; the pool's sink_*_env keys name other variables); "
                              "the node keeps the sink it was given")  # fmt: skip
    assert alerts[1].startswith("sink upload failed (no sink was given to this node)")


async def test_a_bad_sink_is_refused_at_submit_before_any_node(
    tmp_path: Path, make_job, s3: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = make_job(run="true", outputs=["x"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-key")
    async with engine_with(tmp_path / "runs", **sink_settings(s3)) as engine:
        with pytest.raises(SubmitError) as denied:
            await engine.submit(job, "local")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        with pytest.raises(SubmitError) as unset:
            await engine.submit(job, "local")
    assert str(denied.value).startswith(f"pool 'local': sink {s3.url}: access denied")
    assert "not-the-key" not in str(denied.value)
    assert "set AWS_SECRET_ACCESS_KEY in the environment" in str(unset.value)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("run.json"))


async def test_a_preempted_vast_node_resumes_from_the_sink(
    tmp_path: Path, api: StandIn, make_engine: EngineFactory, make_job, s3: Bucket
) -> None:
    """Through the real SDK against the Vast stand-in: an interruptible node syncs its
    checkpoint straight to the sink; Vast takes the node back; the next attempt's node
    seeds its workdir from the sink and the job completes from the checkpoint."""
    spot = gpu_pool(
        "spot-sink", interruptible=True, bid_fraction=0.5, node_lost_after_s=2.0,
        sync_every_s=0.3, max_attempts=2, **sink_settings(s3),
    )  # fmt: skip
    engine = await make_engine(spot)
    job = make_job(run=RESUMING, outputs=["ck/", "result.txt"])
    tap = Tap(engine)
    first = await engine.submit(job, "spot-sink")
    await tap.until(lambda e: isinstance(e, ev.OutputsSynced) and e.run_id == first, 60)
    [instance] = api.cloud.instances
    api.cloud.preempt(instance)
    lost = await asyncio.wait_for(engine.wait(first), 30)
    assert (lost.reason or "").startswith("preempted"), lost.reason
    second = engine.successor(first)
    assert second is not None
    done = await asyncio.wait_for(engine.wait(second), 60)
    assert done.state == "COMPLETED", done.reason
    assert (done.run_dir / "outputs/result.txt").read_text() == "resumed from epoch-3\n"
    assert not (lost.run_dir / "outputs").exists()  # the laptop never had the checkpoint
    resumed = run_json(done.run_dir)["sink"]["resumed_from"]
    assert resumed == {"prefix": f"results/t/{first}", "files": 1, "bytes": 8}
    assert api.cloud.instances == {} and len(api.cloud.destroyed) == 2
    url = f"s3://{s3.name}/results/t/{first}"  # from any machine: by its URL
    pulled = await pull(url, tmp_path / "lost", endpoint=s3.server.endpoint)
    assert not pulled.manifest.complete  # its node never finished an upload: its last sync
    assert (tmp_path / "lost/ck/last.txt").read_text() == "epoch-3\n"
