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
from collections.abc import Callable
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

    def answer(nonce: str, me: str, ticket: str) -> Resume:
        signed = proof(key, nonce, run_id, me, ticket)
        return Resume(run_id=run_id, orchestrator_id=me, ticket=ticket, proof=signed)

    await handshake(endpoint, agent_ticket, RESUME_ALPN, answer)


async def handshake(
    endpoint: Any,
    agent_ticket: str,
    alpn: bytes,
    answer: Callable[[str, str, str], Any],
    timeout_s: float = STEP_TIMEOUT_S,
) -> None:
    """Dial the node's `alpn`, answer its challenge with `answer(nonce, our id, our
    ticket)` and return once it said Resumed (a resume, or a warm node's claim); each of
    the dial and the exchange within `timeout_s`."""
    addr = iroh_endpoint.addr_from_ticket(agent_ticket)
    async with asyncio.timeout(timeout_s):
        conn = await endpoint.connect(addr, alpn)
    try:
        async with asyncio.timeout(timeout_s):
            stream = await conn.accept_bi()
            channel = Channel(stream.recv(), stream.send())
            challenge = await channel.recv()
            if not isinstance(challenge, Challenge):
                raise ReclaimRefused("the node sent no challenge")
            me, ticket = str(endpoint.id()), iroh_endpoint.ticket_of(endpoint)
            await channel.send(answer(challenge.nonce, me, ticket))
            reply = await channel.recv()
            if not isinstance(reply, Resumed):
                raise ReclaimRefused(getattr(reply, "reason", "no answer"))
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
