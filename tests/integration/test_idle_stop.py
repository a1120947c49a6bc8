"""Idle GPUs stop themselves (`idle_gpu_stop_s`): a real agent samples a fake nvidia-smi
reading idle GPUs while a job that never ends runs; the run is stopped FAILED "GPU idle for
…" with its outputs collected — on a pool with a sink, put there by the node first — after
the idle alert, and its owner is told."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.state.paths import default_pools_file
from tests.support import fake_gpu
from tests.support.receiver import Receiver
from tests.support.runs import run_json
from tests.support.s3 import Bucket
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(90)

POOLS = """notify = ["{url}"]

[pools.local]
provider = "local"
idle_gpu_alert_s = 0.5
idle_gpu_stop_s = 1.2
idle_gpu_util_pct = 3
sink = "{sink}"
sink_endpoint = "{endpoint}"
"""


async def test_a_job_whose_gpus_idle_is_stopped_with_its_outputs(
    tmp_path: Path, monkeypatch, make_engine, make_job, receiver: Receiver, s3: Bucket
) -> None:
    path = default_pools_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(POOLS.format(url=receiver.url, sink=s3.url, endpoint=s3.server.endpoint))
    fake_gpu.install("idle-1gpu.txt", tmp_path / "gpu-bin", monkeypatch)  # 2 % at most
    engine = await make_engine()
    job = make_job(run="echo partial > result.txt; sleep 600", outputs=["result.txt"])
    run_id = await engine.submit(job, "local")
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "FAILED" and (view.reason or "").startswith("GPU idle for "), view
    assert (view.run_dir / "outputs/result.txt").read_text() == "partial\n"
    assert run_json(view.run_dir)["sink"]["complete"] is True  # landed from the sink
    assert any("GPUs idle: under 3 %" in alert for alert in view.all_alerts)
    told = f"swjob: t FAILED: {view.reason}"
    both = {told, "swjob: t: GPUs idle"}  # the alert's too: nothing left on its way
    await eventually_async(lambda: both <= set(receiver.titles()), timeout=20)
