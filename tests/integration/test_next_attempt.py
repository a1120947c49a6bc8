"""Next attempt on the local pool (real agents, real iroh on loopback): a run whose node is
lost is run again on a new node carrying its last synced outputs, and a job that resumes
from its checkpoint completes; a job that fails by its own exit code is never retried."""

from __future__ import annotations

import asyncio
import io
import os
import signal
from pathlib import Path

import pytest
from rich.console import Console

from engine.cli.runlist import print_runs
from engine.report import events as ev
from tests.support.engines import engine_with
from tests.support.jobs import RESUMING
from tests.support.runs import run_json
from tests.support.tap import Tap

pytestmark = pytest.mark.timeout(90)


async def test_a_lost_node_is_followed_by_an_attempt_that_resumes_from_the_checkpoint(
    tmp_path: Path, make_job
) -> None:
    job = make_job(run=RESUMING, outputs=["ck/", "result.txt"])
    settings = {"deadline_s": 2.0, "sync_every_s": 0.3, "max_attempts": 2}
    async with engine_with(tmp_path / "runs", **settings) as engine:
        tap = Tap(engine)
        first = await engine.submit(job, "local")
        await tap.until(lambda e: isinstance(e, ev.OutputsSynced) and e.run_id == first)
        lost = engine.run(first)
        assert lost is not None and lost.node is not None
        os.kill(int(lost.node.offer["pid"]), signal.SIGKILL)
        lost = await asyncio.wait_for(engine.wait(first), 30)
        second = engine.successor(first)
        assert second is not None, lost.reason
        done = await asyncio.wait_for(engine.wait(second), 60)
        assert engine.successor(second) is None
    assert lost.state == "FAILED" and (lost.reason or "").startswith("node lost")
    assert (lost.attempt, lost.attempts) == (1, 2)
    assert done.state == "COMPLETED", done.reason
    assert (done.attempt, done.attempts, done.previous_run) == (2, 2, first)
    assert "resumed from epoch-3" in (done.run_dir / "logs/run.log").read_text()
    assert (done.run_dir / "outputs/result.txt").read_text() == "resumed from epoch-3\n"
    attempts = [run_json(view.run_dir)["attempt"] for view in (done, lost)]
    assert attempts == [
        {"number": 2, "of": 2, "first": first, "previous": first},
        {"number": 1, "of": 2, "first": first, "previous": None},
    ]
    assert (done.first_run, lost.first_run) == (first, None)
    listed = Console(file=io.StringIO(), force_terminal=True, width=240, color_system=None)
    print_runs(listed, limit=10)
    rows = listed.file.getvalue().splitlines()
    [entry] = [r for r in rows if f"│ {first} " in r]  # the job: one entry, named by attempt 1
    assert "COMPLETED" in entry and "2/2" in entry
    beneath = [r for r in rows if "└ " in r]
    assert [second in beneath[1], first in beneath[0]] == [True, True], rows
    assert "FAILED" in beneath[0] and "1/2" in beneath[0] and "COMPLETED" in beneath[1]


async def test_a_job_that_fails_by_its_own_exit_code_is_never_retried(
    tmp_path: Path, make_job
) -> None:
    job = make_job(run="exit 3")
    async with engine_with(tmp_path / "runs", max_attempts=3) as engine:
        run_id = await engine.submit(job, "local")
        view = await asyncio.wait_for(engine.wait(run_id), 30)
        assert view.state == "FAILED" and view.exit_code == 3
        assert engine.successor(run_id) is None
