"""An agent killed while its landers land a push (agent/transfer/landproc.py): the run
ends FAILED with the node lost, the landers go with the agent (their pipe ends), and the
node's directory is removed — no helper process keeps writing into it. Real agent, real
landers, kill -9 by pid."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from engine.state.paths import cache_dir
from tests.support.engines import engine_with
from tests.support.processes import pid_alive

pytestmark = [pytest.mark.timeout(120)]


def _landers_of(agent: int) -> list[int]:
    try:
        children = psutil.Process(agent).children()
    except psutil.Error:
        return []
    return [c.pid for c in children if "landserve" in " ".join(_cmdline(c))]


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


async def test_an_agent_killed_mid_push_leaves_no_lander_and_no_node_dir(
    tmp_path: Path, make_job
) -> None:
    files = {f"d{d}/f{i}": "x" * 700 for d in range(24) for i in range(1000)}  # ~12 batches
    job = make_job(files, run="echo ran", workspace={"workdir": "."})
    async with engine_with(tmp_path / "runs", deadline_s=5.0) as engine:
        run_id = await engine.submit(job, "local")
        landers: list[int] = []
        agent = 0
        began = time.monotonic()
        while not landers:  # the push's second batch starts them
            assert time.monotonic() - began < 60, "the push never started its landers"
            node = (run := engine.run(run_id)) and run.node
            if node is not None and node.offer.get("pid"):
                agent = int(node.offer["pid"])
                landers = _landers_of(agent)
            await asyncio.sleep(0.01)
        os.kill(agent, signal.SIGKILL)  # the agent this run's node is, by its pid
        view = await asyncio.wait_for(engine.wait(run_id), 90)
    assert view.state == "FAILED" and "node lost" in (view.reason or "")
    deadline = time.monotonic() + 10
    while any(pid_alive(pid) for pid in landers):
        assert time.monotonic() < deadline, f"landers {landers} outlived their agent"
        await asyncio.sleep(0.05)
    assert not list((cache_dir() / "nodes").glob(f"local-{run_id}-*"))
