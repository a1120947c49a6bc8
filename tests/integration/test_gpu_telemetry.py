"""GPU telemetry end to end: a real agent samples a fake nvidia-smi on its PATH while the
job runs; the engine folds the samples into the run's view, run.json and the idle alarm."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.protocol import MAX_GPUS
from engine.engine import Engine
from engine.report import events as ev
from engine.report.datastream import read_events
from engine.report.views import RunView
from tests.support import fake_gpu
from tests.support.cli import swjob
from tests.support.runs import run_json, run_to_end
from tests.support.tap import Tap


@pytest.fixture
def pools_file(tmp_path: Path) -> Path:
    """The local pool with a 1 s idle alarm (the default 600 s would outlast any test)."""
    config = tmp_path / "swjob-config"
    config.mkdir(parents=True, exist_ok=True)
    path = config / "pools.toml"
    path.write_text('[pools.local]\nprovider = "local"\nidle_gpu_alert_s = 1\n')
    return path


async def run_until(
    engine: Engine, make_job, tmp_path: Path, enough: Callable[[ev.Event], bool]
) -> RunView:
    """A job that runs until the datastream shows `enough` (a count of samples, an alarm):
    a fixed `sleep` in the job is outrun on a loaded machine, or wasted on an idle one."""
    release = tmp_path / "release"
    tap = Tap(engine)
    job = make_job(run=f"until [ -e {release} ]; do sleep 0.05; done")
    run_id = await engine.submit(job, "local")
    try:
        await tap.until(lambda e: e.run_id == run_id and enough(e))
    finally:
        tap.close()
    release.touch()
    return await asyncio.wait_for(engine.wait(run_id), 60)


def samples_beyond(count: int, after: Callable[[ev.Event], bool] = lambda e: True):
    """`enough` for `run_until`: `count` GPU samples once `after` has matched."""
    seen: list[ev.Event] = []

    def enough(event: ev.Event) -> bool:
        if seen or after(event):
            seen.append(event)
        return sum(isinstance(e, ev.GpuMetrics) for e in seen) >= count

    return enough


def idle_alarm(event: ev.Event) -> bool:
    return isinstance(event, ev.Alert) and "GPUs idle" in event.message


async def test_busy_gpus_are_sampled_summarised_and_never_called_idle(
    tmp_path, monkeypatch, pools_file, engine, make_job
) -> None:
    bin_dir = fake_gpu.install("busy-2gpu.txt", tmp_path / "gpu-bin", monkeypatch)
    # 8 samples at 0.2 s: well past the 1 s idle window an idle-reading bug would alarm in
    view = await run_until(engine, make_job, tmp_path, samples_beyond(8))
    assert view.state == "COMPLETED"
    args = (bin_dir / "args").read_text()
    assert "--query-gpu=index,utilization.gpu,memory.used" in args
    assert "--format=csv,noheader,nounits" in args
    samples = [
        e for e in read_events(view.run_dir / "events.jsonl") if isinstance(e, ev.GpuMetrics)
    ]
    assert len(samples) >= 8
    assert [g.index for g in view.gpus] == [0, 1]
    assert view.gpus[1].power_w is None or view.gpus[1].power_w > 0  # [N/A] is None, not 0
    summary = run_json(view.run_dir)["gpu"]
    assert summary["gpus"][0]["util_peak_pct"] == 91.0
    assert summary["gpus"][0]["mem_peak_mb"] == 18240.0
    assert summary["gpus"][1]["util_peak_pct"] == 64.0
    assert 0 < summary["gpu_hours"] < 2 * 10 / 3600  # two GPUs, well under 10 s each
    alerts = [
        e.message for e in read_events(view.run_dir / "events.jsonl") if isinstance(e, ev.Alert)
    ]
    assert not any("GPUs idle" in m for m in alerts)


async def test_idle_gpus_while_running_raise_one_alert(
    tmp_path, monkeypatch, pools_file, engine, make_job
) -> None:
    fake_gpu.install("idle-1gpu.txt", tmp_path / "gpu-bin", monkeypatch)
    # the alarm, then 7 samples (1.4 s) more: a second idle stretch that must not alarm again
    view = await run_until(engine, make_job, tmp_path, samples_beyond(7, after=idle_alarm))
    events = read_events(view.run_dir / "events.jsonl")
    idle = [e.message for e in events if idle_alarm(e)]
    assert len(idle) == 1, idle
    assert "under 5 %" in idle[0]
    assert run_json(view.run_dir)["gpu"]["util_peak_pct"] == 2.0


async def test_a_node_without_nvidia_smi_sends_no_gpu_metrics(engine, make_job) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has a real nvidia-smi")
    view = await run_to_end(engine, make_job(run="sleep 1"))
    assert view.state == "COMPLETED"
    assert not any(isinstance(e, ev.GpuMetrics) for e in read_events(view.run_dir / "events.jsonl"))
    assert view.gpus == [] and run_json(view.run_dir)["gpu"] is None


# ---- a hostile nvidia-smi (a job on Vast runs as root and can replace it) ----------------

HUGE = "0, 1e308, 1e308, 1e308, 1e308, 1e308\n1, 1e308, 1e308, 1e308, 1e308, 1e308"
NOT_NUMBERS = "0, nan, inf, -inf, NaN, -1e400\n1, 50, 1000, 2000, -5, 40"
MANY = "\n".join(f"{i}, 50, 1000, 2000, 100, 60" for i in range(3000))
GARBAGE = "\x01\xff garbage,,,\n-1, 5, 5, 5, 5, 5\n99999999999, 1, 1, 1, 1, 1\n0, 7, 7"
FRAMES = [HUGE, NOT_NUMBERS, GARBAGE, MANY]  # GARBAGE is no sample: the 3rd sample is MANY


def finite_everywhere(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite_everywhere(v) for v in value.values())
    if isinstance(value, list):
        return all(finite_everywhere(v) for v in value)
    return True


async def test_hostile_gpu_readings_never_break_a_run_or_the_operators_tools(
    tmp_path: Path, monkeypatch, engine, make_job
) -> None:
    fake_gpu.install_frames(FRAMES, tmp_path / "gpu-bin", monkeypatch)
    view = await run_until(engine, make_job, tmp_path, samples_beyond(len(FRAMES) - 1))
    assert view.state == "COMPLETED", view.reason
    summary = json.loads((view.run_dir / "run.json").read_text())  # written, and parses
    assert summary["state"] == "COMPLETED"
    assert finite_everywhere(summary)
    assert len(summary["gpu"]["gpus"]) <= MAX_GPUS
    assert summary["gpu"]["util_peak_pct"] <= 100
    samples = [
        e for e in read_events(view.run_dir / "events.jsonl") if isinstance(e, ev.GpuMetrics)
    ]
    assert samples and max(len(e.gpus) for e in samples) == MAX_GPUS  # 3000 cut to 64
    assert (view.run_dir / "events.jsonl").stat().st_size < 1_000_000
    runs = swjob("runs", cwd=tmp_path)
    assert runs.returncode == 0 and view.run_id in runs.stdout, runs.stderr
    logs = swjob("logs", view.run_id, cwd=tmp_path)
    assert logs.returncode == 0, logs.stderr
