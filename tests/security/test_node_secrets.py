"""A hostile job hunting the node's credentials: on a rented node (the Vast stand-in, whose
instance env carries the join token and the instance's own API key, as Vast's does) it
dumps its environment and the agent's `/proc/<pid>/environ`, and finds neither the join
token, nor the container's key, nor the run's re-attach secret; nor does `swjob shell`'s
environment hold them."""

from __future__ import annotations

import asyncio

import pytest

from agent.livewire import ShellOpen
from agent.shell import Kind, frame, read_frame
from engine.engine import Engine
from engine.state.store import Store
from tests.standin.server import StandIn
from tests.support.engines import EngineFactory
from tests.support.vast import gpu_pool
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(90)

HUNT = (
    "env > job_env.txt; "
    "tr '\\0' '\\n' < /proc/$PPID/environ > agent_env.txt; "  # $PPID: the agent
    "cat /proc/$PPID/cmdline | tr '\\0' ' ' > agent_cmdline.txt"
)


@pytest.fixture
async def engine(api: StandIn, make_engine: EngineFactory) -> Engine:
    return await make_engine(gpu_pool())


async def test_a_job_and_a_shell_reading_env_and_proc_find_no_credential(
    engine, api: StandIn, make_job, tmp_path
) -> None:
    release = tmp_path / "release"
    hunt = f"{HUNT}; while [ ! -e {release} ]; do sleep 0.1; done"
    job = make_job(run=hunt, outputs=["job_env.txt", "agent_env.txt", "agent_cmdline.txt"])
    run_id = await engine.submit(job, "gpu")
    try:
        await eventually_async(lambda: (v := engine.run(run_id)) and v.phase == "run", 60)
        (instance,) = api.cloud.instances.values()
        shell = await _shell_output(engine, run_id, b"env; echo ENV-DONE; exit\n")
    finally:
        release.touch()
    container_key = instance.container_key
    token = instance.request["env"]["SWJOB_JOIN_TOKEN"]
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason
    outputs = view.run_dir / "outputs"
    found = {name: (outputs / name).read_text() for name in ("job_env.txt", "agent_env.txt")}
    found["shell"] = shell
    for name, text in found.items():  # each was read: a PATH is in each
        assert "PATH=" in text, name
    assert "ENV-DONE" in shell
    reattach_secret = Store().recovery(run_id)["reattach_key"]
    for name, text in found.items():
        for secret in (token, container_key, reattach_secret):
            assert secret not in text, f"a credential in {name}"
        assert "CONTAINER_API_KEY" not in text and "SWJOB_JOIN_TOKEN" not in text, name
    cmdline = (outputs / "agent_cmdline.txt").read_text()
    assert reattach_secret not in cmdline and token not in cmdline
    assert "--reattach-id" in cmdline  # only the public half is on the node


async def _shell_output(engine: Engine, run_id: str, typed: bytes) -> str:
    """What a shell opened through the engine prints for `typed`, up to its exit."""
    stream = await engine.live.open(run_id, ShellOpen())
    await stream.send.write_all(frame(Kind.DATA, typed))
    out = b""
    async with asyncio.timeout(30):
        while (got := await read_frame(stream.reader)) is not None:
            kind, body = got
            if kind is Kind.EXIT:
                break
            out += body if kind is Kind.DATA else b""
    return out.decode(errors="replace")
