"""The Python API (swjob.AsyncSession / swjob.Session) on the local pool with real agents:
submit, wait, events, logs, stop, typed one-line errors, and the sync facade called from
inside a running event loop (as in Jupyter)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import swjob
from swjob import events as ev
from tests.support.engines import QUICK, local_pools
from tests.support.runs import waiting_job

METRICS = 'echo "{\\"val_loss\\": $LR}" > final_metrics.json; echo lr is $LR; echo $TOKEN'


def _session(tmp_path: Path) -> swjob.AsyncSession:
    return swjob.AsyncSession(local_pools(node_lost_after_s=10.0), runs_dir=tmp_path / "runs",
                              **QUICK)  # fmt: skip


async def test_submit_wait_events_logs(tmp_path: Path, make_job) -> None:
    job = make_job(run=METRICS, workspace={"workdir": "."}, outputs=["final_metrics.json"],
                   env={"TOKEN": "tok-secret-123"})  # fmt: skip
    async with _session(tmp_path) as s:
        run = await s.submit(job, env={"LR": "0.125"})
        seen = [event async for event in run.events()]
        result = await run.wait()
    assert (result.ok, result.state, result.exit_code) == (True, "COMPLETED", 0)
    assert result.name == "t[LR=0.125]" and run.view.label == "t[LR=0.125]"
    assert json.loads((result.outputs_dir / "final_metrics.json").read_text()) == {
        "val_loss": 0.125
    }
    assert result.manifest is not None and result.duration_s > 0 and result.durations_s
    assert isinstance(seen[0], ev.Submitted) and isinstance(seen[-1], ev.Finished)
    assert [e.seq for e in seen] == sorted(e.seq for e in seen)
    logs = run.logs()
    assert "tok-secret-123" not in logs and "lr is ***" in logs  # env values: masked


async def test_stop_and_typed_errors(tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = waiting_job(tmp_path / "project", "waits", release)
    async with _session(tmp_path) as s:
        run = await s.submit(job)
        async for event in run.events():
            if isinstance(event, ev.Log) and any("line 3" in ln.text for ln in event.lines):
                break
        await run.stop()
        result = await run.wait(timeout=60)
        with pytest.raises(swjob.SubmitError, match="is not running"):
            await run.stop()
        with pytest.raises(swjob.SwjobError, match="unknown pool 'nope'"):
            await s.submit(job, pool="nope")
        with pytest.raises(swjob.JobFileError, match=r"missing\.toml"):
            await s.submit(tmp_path / "missing.toml")
    assert (result.state, result.reason) == ("FAILED", "stopped by operator")


async def test_sync_session_inside_a_running_loop(tmp_path: Path, make_job) -> None:
    job = make_job(run="echo hi from $N", env={})
    with swjob.Session(local_pools(), runs_dir=tmp_path / "runs", **QUICK) as s:
        run = s.submit(job, env={"N": "7"})
        result = run.wait(timeout=60)
        kinds = {type(e).__name__ for e in run.events()}
        assert "hi from 7" in run.logs()
        assert s.run(run.run_id).view.exit_code == 0
    assert result.ok and result.name == "t[N=7]"
    assert {"Submitted", "Transition", "Finished"} <= kinds
