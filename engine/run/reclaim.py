"""Point an adopted run's node at this engine (the engine's half of agent/reattach.py).

The node dials its orchestrator; after adoption that is us, but the node still knows
only its dead owner's address and id. So we dial the node (the address it gave in its
last Hello, kept in the run's recovery facts), prove the run's re-attach credential,
and hand it our id and address; it then joins us with its join token as usual. We
retry until the node has joined (or the run's recovery gives up on it and cancels us):
a node between two redials, or a connection path still being found, answers later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from agent import endpoint as iroh_endpoint
from agent.protocol import RESUME_ALPN, Challenge, Channel, Resume, Resumed
from agent.reattach import STEP_TIMEOUT_S, proof
from agent.redial import Backoff, describe
from engine.run.control import NodeSession

log = logging.getLogger("swjob.engine")


class ReclaimRefused(Exception):
    """The node answered, but did not accept us (its reason)."""


async def reclaim(endpoint: Any, agent_ticket: str, run_id: str, key: str) -> None:
    """One resume handshake; returns once the node has accepted us as its orchestrator."""
    addr = iroh_endpoint.addr_from_ticket(agent_ticket)
    async with asyncio.timeout(STEP_TIMEOUT_S):
        conn = await endpoint.connect(addr, RESUME_ALPN)
    try:
        async with asyncio.timeout(STEP_TIMEOUT_S):
            stream = await conn.accept_bi()
            channel = Channel(stream.recv(), stream.send())
            challenge = await channel.recv()
            if not isinstance(challenge, Challenge):
                raise ReclaimRefused("the node sent no challenge")
            me, ticket = str(endpoint.id()), iroh_endpoint.ticket_of(endpoint)
            signed = proof(key, challenge.nonce, run_id, me, ticket)
            await channel.send(
                Resume(run_id=run_id, orchestrator_id=me, ticket=ticket, proof=signed)
            )
            answer = await channel.recv()
            if not isinstance(answer, Resumed):
                raise ReclaimRefused(getattr(answer, "reason", "no answer"))
    finally:
        conn.close(0, b"resumed")


async def until_joined(endpoint: Any, session: NodeSession, agent_ticket: str, key: str) -> None:
    """Reclaim the node until it has joined this engine's session for the run."""
    backoff = Backoff(first=0.5, cap=5.0)
    while not session.joined.is_set() and not session.closed:
        try:
            await reclaim(endpoint, agent_ticket, session.run_id, key)
            log.info("node of %s accepted this engine; awaiting its join", session.run_id)
        except Exception as exc:  # dead, unreachable, mid-restart: one failed attempt each;
            # the run's rejoin deadline decides when to give up
            log.info("reclaiming the node of %s: %s", session.run_id, describe(exc))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(backoff.next()):
                await session.joined.wait()
