"""Notifications (docs/notifications.md) through Apprise's real URL handling to a real HTTP
receiver on loopback: a run stopped at its cap tells the pools file's target, once each,
that it is at 80 % and that it was stopped, with the job's secret masked — and a refusal
by the service is retried, never holding the run up; `swjob notify --test` says per
target whether the message was taken."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from engine.api import Sweep, expand
from engine.cli import notify
from engine.jobs.pools import Caps
from engine.state.paths import default_pools_file
from tests.support.cli import swjob
from tests.support.engines import engine_with
from tests.support.receiver import Receiver
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(90)

SECRET = "tok-9f3c1a77"


def _pools_file(*targets: str) -> Path:
    path = default_pools_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"notify = {list(targets)!r}\n\n[pools]\n".replace("'", '"'))
    return path


async def test_a_capped_run_is_told_once_each_secrets_masked(
    tmp_path: Path, make_job, receiver: Receiver
) -> None:
    _pools_file(receiver.url)
    job = make_job(run="while true; do echo tick; sleep 0.3; done", env={"TOKEN": SECRET})
    runs = tmp_path / f"runs-{SECRET}"  # the outputs' path carries the secret
    async with engine_with(runs, caps=Caps(max_hours=0.001)) as engine:  # 3.6 s
        run_id = await engine.submit(job, "local")
        view = await asyncio.wait_for(engine.wait(run_id), 60)
        assert view.state == "FAILED" and (view.reason or "").startswith("cap reached"), view
    assert receiver.refused == 1  # the first message was refused, then retried
    titles = receiver.titles()
    assert sorted(titles) == sorted(
        ["swjob: t: 80% of its max_hours cap", f"swjob: t stopped: {view.reason}"]
    ), titles
    [ended] = [m for m in receiver.messages if "stopped" in m["title"]]
    assert f"run {run_id} on pool local: FAILED" in ended["message"]
    assert "outputs: " in ended["message"] and "runs-***" in ended["message"]
    assert all(SECRET not in m["title"] + m["message"] for m in receiver.messages)


def test_notify_test_says_per_target_whether_it_was_taken(tmp_path: Path, capsys) -> None:
    ok = Receiver()
    gone = Receiver()
    gone.close()  # nothing listens there any more
    try:
        _pools_file(ok.url, gone.url)
        assert notify.main(argparse.Namespace(test=False, pools=None)) == 0  # listed only
        assert capsys.readouterr().out == "1. json://…\n2. json://…\n"
        tested = swjob("notify", "--test", cwd=tmp_path)
        eventually(lambda: ok.titles() == ["swjob: test"], timeout=10)
    finally:
        ok.close()
    assert tested.returncode == 1, tested
    assert "1. json://… ok" in tested.stdout and "2. json://… FAILED" in tested.stdout
    assert "127.0.0.1" not in tested.stdout + tested.stderr  # the URL is never shown


async def test_a_sweep_says_its_end_once_after_its_runs(
    tmp_path: Path, make_job, receiver: Receiver
) -> None:
    _pools_file(receiver.url)
    job = make_job(run='exit "$X"', name="sw")
    async with engine_with(tmp_path / "runs") as engine:
        sweep = Sweep(engine, job, expand({"X": ["0", "3"]}), concurrency=2)
        await sweep.run()
    titles = receiver.titles()
    assert titles.count("swjob: sweep sw finished: 1 COMPLETED, 1 FAILED") == 1, titles
    assert sorted(t for t in titles if "sweep" not in t) == [
        "swjob: sw[X=0] COMPLETED",
        "swjob: sw[X=3] FAILED: run exited with code 3",
    ]
    [summary] = [m for m in receiver.messages if "sweep" in m["title"]]
    assert summary["message"] == f"sweep {sweep.sweep_id}: 2 variants, $0.00 spent"
