"""The engine's side of agent/codefetch.py: a booting node asks for the agent's code.

The node opens one stream on `swjob/code/1`, writes `{"run_id", "token"}` and finishes;
the engine answers the bundle of its own `agent` package (agent_source.agent_bundle) and
finishes, and the node checks it against the SHA-256 its boot command names. A peer
holding no live run's token gets nothing: it is closed like a stranger at the control
door, within the same `PeerGate` (so a flood of askers holds no more than a flood of
hellos) and the same few seconds to ask.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engine.providers.agent_source import agent_bundle
from engine.run.peergate import PeerGate

if TYPE_CHECKING:
    from engine.run.control import NodeSession

log = logging.getLogger("swjob.control")

ASK_TIMEOUT_S = 5.0
MAX_ASK = 4096
SEND_TIMEOUT_S = 120.0  # ~100 KiB over a relay


async def serve_code(
    conn: Any, remote: str, sessions: Mapping[str, NodeSession], gate: PeerGate
) -> None:
    refused = gate.enter(remote)
    if refused is not None:
        log.info("refused code request from %s: %s", remote[:16], refused)
        conn.close(4, b"busy")
        return
    try:
        await _serve(conn, remote, sessions)
    finally:
        gate.leave(remote)


async def _serve(conn: Any, remote: str, sessions: Mapping[str, NodeSession]) -> None:
    try:
        async with asyncio.timeout(ASK_TIMEOUT_S):
            stream = await conn.accept_bi()
            ask = await _read_ask(stream.recv())
        session = sessions.get(str(ask.get("run_id")))
        token = ask.get("token")
        if session is None or not isinstance(token, str) or not session.may_fetch_code(token):
            raise ValueError("no run of ours with that token awaits its agent")
    except Exception as exc:
        log.warning("refused code request from %s: %s", remote[:16], exc)
        conn.close(3, b"refused")
        return
    bundle, _ = agent_bundle()
    try:
        async with asyncio.timeout(SEND_TIMEOUT_S):
            await stream.send().write_all(bundle)
            await stream.send().finish()
            await conn.closed()  # the node hangs up once it has read it all
    except Exception as exc:
        log.info("agent code for run %s not sent whole: %s", session.run_id, exc)
    with contextlib.suppress(Exception):
        conn.close(0, b"done")


async def _read_ask(recv: Any) -> dict[str, Any]:
    data = bytearray()
    while piece := await recv.read(MAX_ASK):
        data += piece
        if len(data) > MAX_ASK:
            raise ValueError(f"request over {MAX_ASK} bytes")
    found = json.loads(bytes(data))
    if not isinstance(found, dict):
        raise ValueError("request is not an object")
    return found
