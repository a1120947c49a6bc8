"""Re-attach: how a node comes to obey an engine other than the one that started it.

A run outlives the engine process that started it (kill -9, a closed laptop), and the
engine that carries it on may have another iroh identity. So the node does not obey one
endpoint id forever: the run has a re-attach key pair (ed25519, iroh's own keys). The
provisioning engine keeps its secret half in the operator's 0600 state store; the node
is given only the public half (`--reattach-id`, on its command line: it is no secret).
Whatever a job on the node can read — the agent's argv, PID 1's environment on Vast, the
node's files — is therefore not enough to point the node at another engine. An adopting
engine dials the node on `RESUME_ALPN`; the node sends a fresh nonce; the engine answers
with its endpoint id, its address and its signature of (nonce, run id, endpoint id,
address). The node verifies it with the public half, and checks that the claimed endpoint
id is the connection's authenticated peer, then dials that engine from then on. A proof
is good for one nonce and one peer, and a peer without the secret half is refused and
logged: rogue peers stay out.

Both sides import this module (the proof has one definition).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iroh import iroh_ffi

from agent.protocol import RESUME_ALPN, Challenge, Channel, Reject, Resume, Resumed

log = logging.getLogger("swjob.agent")

STEP_TIMEOUT_S = 10.0
MAX_PENDING = 4  # resume handshakes at once: a flood of rogue dials cannot pile up


@dataclass(frozen=True)
class Target:
    """The orchestrator a node obeys: its endpoint id and the address it dials."""

    orchestrator_id: str
    ticket: str


def new_key() -> str:
    """A fresh re-attach secret (hex): the engine's to keep, never the node's."""
    return iroh_ffi.SecretKey.generate().to_bytes().hex()


def public_of(key: str) -> str:
    """The public half of a re-attach secret, for the node; "" for what is not one (a run
    recorded before re-attach keys were key pairs: it cannot be re-attached)."""
    try:
        return str(iroh_ffi.SecretKey.from_bytes(bytes.fromhex(key)).public())
    except Exception:
        return ""


def _message(nonce: str, run_id: str, orchestrator_id: str, ticket: str) -> bytes:
    return "\n".join((nonce, run_id, orchestrator_id, ticket)).encode()


def proof(key: str, nonce: str, run_id: str, orchestrator_id: str, ticket: str) -> str:
    """The engine's signature (hex) of a resume, made with the run's re-attach secret."""
    secret = iroh_ffi.SecretKey.from_bytes(bytes.fromhex(key))
    return secret.sign(_message(nonce, run_id, orchestrator_id, ticket)).to_bytes().hex()


def verified(public: str, signed: str, *fields: str) -> bool:
    """Does `signed` prove the holder of `public`'s secret half signed these fields?"""
    try:
        signature = iroh_ffi.Signature.from_bytes(bytes.fromhex(signed))
        iroh_ffi.EndpointId.from_string(public).verify(_message(*fields), signature)
    except Exception:  # a malformed key or signature, or one that does not verify
        return False
    return True


class ResumeService:
    """The node's side: accepts resume connections and retargets the agent on a valid proof."""

    alpn = RESUME_ALPN

    def __init__(self, run_id: str, public: str, on_resume: Callable[[Target], None]) -> None:
        self._run_id = run_id
        self._public = public
        self._on_resume = on_resume
        self._handlers: set[asyncio.Task[None]] = set()

    async def serve(self, endpoint: Any) -> None:
        try:
            while (incoming := await endpoint.accept_next()) is not None:
                if len(self._handlers) >= MAX_PENDING:
                    with contextlib.suppress(Exception):
                        incoming.refuse()
                    continue
                task = asyncio.create_task(self._handle(incoming))
                self._handlers.add(task)
                task.add_done_callback(self._handlers.discard)
        finally:
            for task in self._handlers:
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _handle(self, incoming: Any) -> None:
        conn = None
        try:
            async with asyncio.timeout(STEP_TIMEOUT_S):
                accepting = await incoming.accept()
                alpn = await accepting.alpn()
                conn = await accepting.connect()
                service = self.service_for(alpn)
                if service is None:
                    return
                await service._handshake(conn, str(conn.remote_id()))
        except Exception as exc:
            log.warning("resume attempt failed: %s", type(exc).__name__)
        finally:
            if conn is not None:
                conn.close(0, b"resume over")

    async def _handshake(self, conn: Any, remote: str) -> None:
        stream = await conn.open_bi()
        channel = Channel(stream.recv(), stream.send())
        nonce = secrets.token_hex(16)
        await channel.send(Challenge(nonce=nonce))
        msg = await channel.recv()
        reason = self._refusal(msg, nonce, remote)
        if reason is not None:
            log.warning("refused resume from %s: %s", remote[:16], reason)
            await channel.send(Reject(reason=reason))
        else:
            self._accept(msg)
            await channel.send(Resumed())
        send = stream.send()
        await send.finish()
        with contextlib.suppress(Exception):  # let the peer read the answer before closing
            async with asyncio.timeout(2.0):
                await conn.closed()

    def service_for(self, alpn: bytes) -> ResumeService | None:
        """The service that answers a connection on `alpn` (None: it is closed unanswered);
        a warm node's agent routes its two services through one accept loop (agent/warm.py)."""
        return self if alpn == self.alpn else None

    def _accept(self, msg: Any) -> None:
        """A proven peer's message: obey the orchestrator it names."""
        log.info("run taken over by orchestrator %s", msg.orchestrator_id[:16])
        self._on_resume(Target(msg.orchestrator_id, msg.ticket))

    def _refusal(self, msg: object, nonce: str, remote: str) -> str | None:
        if not isinstance(msg, Resume):
            return "expected resume"
        if msg.run_id != self._run_id:
            return "not this node's run"
        if msg.orchestrator_id != remote:
            return "endpoint id is not the peer's own"
        fields = (nonce, msg.run_id, msg.orchestrator_id, msg.ticket)
        if not self._public or not verified(self._public, msg.proof, *fields):
            return "bad re-attach proof"
        return None
