"""The boot timeline end to end: `swjob run` on a Vast pool (the real SDK against the
stand-in, whose instances go null → loading → running and whose on-start command really
installs and starts the agent) prints every boot step in order as it happens and leaves
them in run.json and events.jsonl, from which `swjob attach` prints them again; the local
pool records only the steps it really has, and a run's wait for a free node is not boot."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.report.boot import STEPS
from engine.report.datastream import read_events
from engine.report.events import Boot, BootPhase
from tests.standin.server import StandIn
from tests.support.engines import engine_with

pytestmark = pytest.mark.timeout(90)

POOLS = """
[pools.gpu]
provider = "vastai"
image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
agent_install = "swjob"
boot_timeout_s = 60
[pools.gpu.resources]
gpu_count = 1
gpu_memory_mb = 24000
"""
LABELS = [
    "offer chosen",
    "instance created",
    "image loading",
    "container running",
    "agent installed",
    "agent joined",
    "pre-flight",  # after the boot: the node checked before the workspace comes
]
SECRET = "hf-secret-value-4242"


def test_swjob_run_on_vast_prints_each_boot_step_in_order_and_keeps_them_in_run_json(
    tmp_path: Path, api: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.cloud.image_has_uv = False  # the install step is pip's, as on the pytorch image
    # each state lasts well past the asserted floors below: a loaded machine sees a state's
    # start late by up to ~0.15 s (its create call returned that late under a suite's load)
    api.cloud.faults.schedule_s = 0.5  # actual_status null: the host schedules it
    api.cloud.faults.boot_delay_s = 0.8  # "loading": the image pull
    monkeypatch.setenv("SWJOB_VAST_BOOT_POLL_S", "0.05")  # each state lasts several polls
    (tmp_path / "pools.toml").write_text(POOLS)
    job = f'[job]\nname = "boot"\nrun = "echo hi"\n[job.env]\nHF_TOKEN = "{SECRET}"\n'
    (tmp_path / "job.toml").write_text(job)
    cli = subprocess.run(
        [sys.executable, "-m", "engine.cli.main", "run", "job.toml",
         "--pools", "pools.toml", "--pool", "gpu"],
        cwd=tmp_path, capture_output=True, text=True, timeout=80, check=False,
    )  # fmt: skip
    out = cli.stdout
    assert cli.returncode == 0, out + cli.stderr
    printed = [line.split(" boot ", 1)[1].strip() for line in out.splitlines() if " boot " in line]
    assert [p.split(" (")[0] for p in printed] == LABELS, out
    assert "offer 103: 1× RTX 3090, $0.220/h" in printed[0]
    assert "pulling pytorch/pytorch" in printed[2]  # Vast's status_msg, shown with the step
    assert "success, running" in printed[3]
    assert "node booted in" in out and "not seen" not in out
    assert out.index("agent joined") < out.index("RunJob")  # printed as it happened

    run_json = next(tmp_path.rglob("run.json"))
    boot = json.loads(run_json.read_text())["boot"]
    steps = boot["steps"]
    assert [s["phase"] for s in steps] == [p.value for p in STEPS]
    assert all(s["at"] is not None and s["seconds"] is not None for s in steps), steps
    times = [s["at"] for s in steps]
    assert times == sorted(times), steps
    assert steps[2]["seconds"] >= 0.2  # created → loading: the scheduling the stand-in played
    assert steps[3]["seconds"] >= 0.4  # loading → running: the pull
    assert steps[4]["seconds"] > 0  # the on-start command's real pip step, timed on the node
    assert boot["total_s"] >= sum(s["seconds"] for s in steps[:4])

    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine.cli.main",
            "attach",
            run_json.parent.name,
            "--pools",
            "pools.toml",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip  (its history, from events.jsonl: what an adopting engine starts from)
    assert [line for line in again.stdout.splitlines() if " boot " in line] == [
        line for line in out.splitlines() if " boot " in line
    ], again.stdout + again.stderr

    written = [e for e in read_events(run_json.parent / "events.jsonl") if isinstance(e, Boot)]
    assert [e.phase for e in written] == [BootPhase.SLOT_TAKEN, *STEPS]  # durable, in order
    assert all(e.detail for e in written[1:5])  # the details the secrets could hide in
    for text in (json.dumps(boot), *(e.model_dump_json() for e in written), out):
        assert SECRET not in text and api.api_key not in text


async def test_the_local_pool_records_only_the_boot_steps_it_has(engine, make_job) -> None:
    run_id = await engine.submit(make_job(run="true"), "local")
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason
    boot = json.loads((view.run_dir / "run.json").read_text())["boot"]
    seen = {s["phase"]: s for s in boot["steps"] if s["at"] is not None}
    assert list(seen) == ["instance_created", "agent_joined"]
    assert seen["instance_created"]["detail"].startswith("swjob-agent process ")
    for step in boot["steps"]:
        if step["phase"] not in seen:  # no image, no install here: not seen, never 0 s
            assert step["seconds"] is None, step
    assert boot["total_s"] is not None and boot["total_s"] > 0


async def test_a_run_that_waited_for_a_free_node_slot_does_not_count_the_wait_as_boot(
    tmp_path: Path, make_job
) -> None:
    """One node at a time: the second run waits in PENDING until the first ends; its boot
    starts when it got the slot (its provisioning row keeps the whole wait)."""
    async with engine_with(tmp_path / "runs", max_nodes=1) as engine:
        first = await engine.submit(make_job(run="sleep 6"), "local")
        second = await engine.submit(make_job(run="true"), "local")
        views = [await asyncio.wait_for(engine.wait(r), 60) for r in (first, second)]
    assert [v.state for v in views] == ["COMPLETED", "COMPLETED"]
    waited = views[1]
    boot = json.loads((waited.run_dir / "run.json").read_text())["boot"]
    queued = json.loads((waited.run_dir / "run.json").read_text())["durations_s"]["provisioning"]
    assert queued >= 6.0  # it did wait for the first run's node
    # its own boot is a second or so, a few on a loaded machine: well short of the queueing
    assert boot["total_s"] is not None and boot["total_s"] < queued - 3.0, (boot, queued)
    created = next(s for s in boot["steps"] if s["phase"] == "instance_created")
    assert created["seconds"] < queued - 3.0  # not the queueing before it
