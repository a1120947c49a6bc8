"""The agent-code service (`swjob/code/1`) serves only a booting node of one of our runs:
a stranger — no token, or a live run's id with a wrong token — gets the connection closed
and not a byte of code (real iroh endpoints on loopback)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agent import endpoint as iroh_endpoint
from agent.protocol import CODE_ALPN
from tests.security.helpers import rogues, waiting_run
from tests.support.engines import engine_with
from tests.support.waiting import eventually_async

pytestmark = [pytest.mark.timeout(90)]


async def ask_code(ep: Any, addr: Any, run_id: str, token: str) -> tuple[bytes, str]:
    """What the service answers a code request, and why it closed the connection."""
    conn = await ep.connect(addr, CODE_ALPN)
    bi = await conn.open_bi()
    await bi.send().write_all(json.dumps({"run_id": run_id, "token": token}).encode())
    await bi.send().finish()
    got = b""
    try:
        while piece := await bi.recv().read(1 << 16):
            got += piece
    except Exception:
        pass  # the engine closed the connection: what it said is the close reason
    return got, str(await asyncio.wait_for(conn.closed(), 15))


async def test_strangers_get_no_code(tmp_path: Path, make_job, record_fault) -> None:
    go = tmp_path / "go"
    job = make_job(run=waiting_run(go))
    async with engine_with(tmp_path / "runs") as engine, rogues(1) as (ep,):
        run_id = await engine.submit(job, "local")
        await eventually_async(lambda: engine.run(run_id).phase == "run")
        addr = iroh_endpoint.addr_from_ticket(iroh_endpoint.ticket_of(engine._endpoint))
        unknown = await ask_code(ep, addr, "no-such-run", "guess")
        wrong = await ask_code(ep, addr, run_id, "wrong-token")
        go.touch()
        assert (await engine.wait(run_id)).state == "COMPLETED"  # the run never noticed
    assert unknown[0] == b"" and "refused" in unknown[1], unknown
    assert wrong[0] == b"" and "refused" in wrong[1], wrong
    record_fault(
        "stranger asks the agent-code service (no token; a live run's id, wrong token)",
        None,
        "connection closed, no code sent",
    )
