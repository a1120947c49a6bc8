"""An operator killed while the job floods its log: the node journals the flood and the
step's exit while nobody listens, and replays it all to the adopter. The adopter must wait
for the whole replay before it judges whether the step ever reached the node: judged
early (the exit not replayed yet), it sent the step again and the job ran twice."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from engine.jobs.pools import load_pools
from engine.report import appender
from tests.support.cli import Cli
from tests.support.recovery import recover
from tests.support.runs import agent_pid, only_run_dir
from tests.support.waiting import eventually

FLOOD = 20_000


async def test_a_long_replay_does_not_run_the_job_again(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    release, counter = tmp_path / "release", tmp_path / "executions"
    run = (
        f"echo start; while [ ! -e {release} ]; do sleep 0.05; done; "
        f"seq 1 {FLOOD} | sed 's/^/line /'; echo ran >> {counter}"
    )
    (tmp_path / "job.toml").write_text(f'[job]\nname = "flood"\nrun = "{run}"\n')
    cli = clis("run", "job.toml", cwd=tmp_path)
    run_dir = only_run_dir(tmp_path / "swjob-runs", "flood")
    log = run_dir / "logs" / "run.log"
    eventually(lambda: log.exists() and "start" in log.read_text(), 60, "the job started")
    cli.kill9()
    agent = psutil.Process(agent_pid(run_dir))
    release.touch()
    eventually(lambda: counter.exists() and not agent.children(), 60, "the step exited")

    view = await recover(tmp_path / "swjob-runs", load_pools(None), run_dir.name)
    assert view.state == "COMPLETED" and view.exit_code == 0
    assert counter.read_text() == "ran\n", "the job ran more than once"
    lines = log.read_text().splitlines()
    assert lines == ["start", *(f"line {i}" for i in range(1, FLOOD + 1))]


async def test_a_log_line_is_on_record_before_it_is_in_the_step_log(
    engine, make_job, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step log never holds a line events.jsonl lacks: an owner killed between the two
    writes would otherwise leave a line in the log that the node then replays to the
    adopter, and a console that showed the log's tail showed it twice (seen under a loaded
    full suite). Both go through the one writer thread, in the order they are queued."""
    queued: list[tuple[str, bytes]] = []
    put = appender._Writer.put

    def spy(self: appender._Writer, item: appender.Item) -> None:
        handle, data = item
        if isinstance(data, bytes) and handle is not None:
            queued.append((os.readlink(f"/proc/self/fd/{handle.fd}"), data))
        put(self, item)

    monkeypatch.setattr(appender._Writer, "put", spy)
    job = make_job(run="echo needle-line")
    view = await asyncio.wait_for(engine.wait(await engine.submit(job, "local")), 60)
    assert view.state == "COMPLETED", view.reason
    order = [Path(path).name for path, data in queued if b"needle-line" in data]
    assert order[:2] == ["events.jsonl", "run.log"], order
