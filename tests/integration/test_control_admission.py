"""Who may talk to the orchestrator: real iroh endpoints on loopback playing honest and
hostile nodes against the engine's control service."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agent import endpoint as iroh_endpoint
from agent.protocol import (
    CTL_ALPN,
    XFER_ALPN,
    Channel,
    Heartbeat,
    Hello,
    LogBatch,
    LogLine,
    NodeFacts,
    Reject,
    Step,
    Stream,
    Welcome,
)
from engine.run import control
from engine.run.control import ControlServer, NodeSession
from tests.support.waiting import eventually_async

FACTS = NodeFacts(
    hostname="h", os="linux", cpus=1, memory_mb=1, disk_free_mb=1,
    python_version="3.11", agent_version="0",
)  # fmt: skip


class Harness:
    def __init__(self, server_ep: Any, server: ControlServer) -> None:
        self.server_ep = server_ep
        self.server = server
        self.lost: list[str] = []
        self.events: list[Any] = []
        self.peers: list[Any] = []

    def session(self, run_id: str, token: str, deadline_s: float = 5.0) -> NodeSession:
        session = NodeSession(
            run_id, token, heartbeat_s=0.2, deadline_s=deadline_s,
            on_event=self.events.append, on_lost=self.lost.append,
        )  # fmt: skip
        self.server.sessions[run_id] = session
        return session

    async def peer(self) -> Any:
        ep = await iroh_endpoint.bind(accept=False)
        self.peers.append(ep)
        return ep

    async def join(self, ep: Any, run_id: str, token: str) -> tuple[Any, Channel, Any]:
        addr = iroh_endpoint.addr_from_ticket(iroh_endpoint.ticket_of(self.server_ep))
        conn = await ep.connect(addr, CTL_ALPN)
        bi = await conn.open_bi()
        channel = Channel(bi.recv(), bi.send())
        await channel.send(Hello(run_id=run_id, token=token, facts=FACTS))
        return conn, channel, await asyncio.wait_for(channel.recv(), 30)


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    ep = await iroh_endpoint.bind(accept=True)
    server = ControlServer(ep)
    server.start()
    h = Harness(ep, server)
    try:
        yield h
    finally:
        for session in list(server.sessions.values()):
            await session.close()
        await server.stop()
        for peer in h.peers:
            await peer.close()
        await ep.close()


async def test_the_right_token_is_welcomed(harness: Harness) -> None:
    session = harness.session("r1", "tok-good")
    _, _, reply = await harness.join(await harness.peer(), "r1", "tok-good")
    assert isinstance(reply, Welcome) and reply.replay_after == 0
    assert session.joined.is_set() and session.facts == FACTS


async def test_a_wrong_token_is_refused(harness: Harness) -> None:
    session = harness.session("r1", "tok-good")
    _, _, reply = await harness.join(await harness.peer(), "r1", "tok-bad")
    assert reply == Reject(reason="wrong join token")
    assert not session.joined.is_set()


async def test_a_token_is_single_use_but_its_node_may_rejoin(harness: Harness) -> None:
    harness.session("r1", "tok")
    node = await harness.peer()
    conn, _, first = await harness.join(node, "r1", "tok")
    assert isinstance(first, Welcome)
    _, _, thief = await harness.join(await harness.peer(), "r1", "tok")
    assert thief == Reject(reason="join token already used by another node")
    conn.close(0, b"drop")
    _, _, again = await harness.join(node, "r1", "tok")
    assert isinstance(again, Welcome)


async def test_a_late_token_and_an_unknown_run_are_refused(harness: Harness) -> None:
    session = harness.session("r1", "tok")
    await session.close()
    _, _, late = await harness.join(await harness.peer(), "r1", "tok")
    assert late == Reject(reason="run is over")
    _, _, unknown = await harness.join(await harness.peer(), "nope", "tok")
    assert unknown == Reject(reason="unknown run")


async def test_transfer_connections_from_unadmitted_peers_are_closed(harness: Harness) -> None:
    session = harness.session("r1", "tok")
    stranger = await harness.peer()
    addr = iroh_endpoint.addr_from_ticket(iroh_endpoint.ticket_of(harness.server_ep))
    conn = await stranger.connect(addr, XFER_ALPN)
    reason = await asyncio.wait_for(conn.closed(), 30)
    assert "not admitted" in reason
    assert session._xfer is None


async def test_a_peer_that_sends_no_hello_is_dropped(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "HELLO_TIMEOUT_S", 0.5)
    addr = iroh_endpoint.addr_from_ticket(iroh_endpoint.ticket_of(harness.server_ep))
    conn = await (await harness.peer()).connect(addr, CTL_ALPN)
    reason = await asyncio.wait_for(conn.closed(), 30)
    assert "no hello" in reason


async def test_replayed_events_are_delivered_once(harness: Harness) -> None:
    harness.session("r1", "tok")
    _, channel, _ = await harness.join(await harness.peer(), "r1", "tok")
    line = [LogLine(stream=Stream.STDOUT, text="x")]
    for seq in (1, 2, 2, 1, 3):
        await channel.send(LogBatch(seq=seq, step=Step.RUN, lines=line))
    # every batch is handled in order: once the last one (3) is in, a duplicate would be too
    await eventually_async(lambda: any(e.seq == 3 for e in harness.events), 30, "batch 3")
    assert [e.seq for e in harness.events] == [1, 2, 3]


async def test_a_silent_node_is_declared_lost_within_the_deadline(harness: Harness) -> None:
    harness.session("r1", "tok", deadline_s=1.0)
    conn, _, _ = await harness.join(await harness.peer(), "r1", "tok")
    conn.close(0, b"vanish")
    vanished = time.monotonic()
    await eventually_async(lambda: harness.lost, 10, "the node declared lost")
    took = time.monotonic() - vanished
    assert 0.9 <= took <= 2.5, f"declared lost after {took:.2f} s for a 1 s deadline"
    assert harness.lost[0].startswith("no heartbeat for")


async def test_a_node_lost_after_a_second_agent_came_with_its_token_says_so(
    harness: Harness,
) -> None:
    """A Vast.ai container restarts (host reboot): its agent and job die, the on-start runs
    again and a second agent comes with the run's token, refused as a token used twice.
    The run was then lost for "no heartbeat" alone, with nothing to tell the operator
    that the node had restarted (seen with the stand-in restarting a running container)."""
    harness.session("r1", "tok", deadline_s=1.0)
    conn, _, _ = await harness.join(await harness.peer(), "r1", "tok")
    conn.close(0, b"container restarted")
    _, _, twin = await harness.join(await harness.peer(), "r1", "tok")
    assert twin == Reject(reason="join token already used by another node")
    await eventually_async(lambda: harness.lost, 10, "the node declared lost")
    assert harness.lost == [
        "no heartbeat for 1 s; another agent had come with this run's join token (a restart?)"
    ]


async def _talk(channel: Channel) -> None:
    """What a live agent does on its control connection: a heartbeat every 0.2 s."""
    while True:
        await channel.send(Heartbeat(last_seq=0))
        await asyncio.sleep(0.2)


async def test_a_talking_nodes_late_transfer_connection_is_waited_for(harness: Harness) -> None:
    """A hundred agents joining at once on a busy machine: the control connections come
    up, the transfer dials fail their handshakes and back off. Runs failed "no transfer
    connection: node not connected for 10 s" while their nodes heartbeated; the wait now
    lasts while the node talks."""
    session = harness.session("r1", "tok", deadline_s=1.0)
    node = await harness.peer()
    _, channel, _ = await harness.join(node, "r1", "tok")
    talking = asyncio.create_task(_talk(channel))
    try:
        opening = asyncio.create_task(session.open_bi())
        began = time.monotonic()
        while time.monotonic() - began < 2.5:  # well past the 1 s deadline: the late dial
            assert not opening.done(), opening
            await asyncio.sleep(0.1)
        addr = iroh_endpoint.addr_from_ticket(iroh_endpoint.ticket_of(harness.server_ep))
        xfer = await node.connect(addr, XFER_ALPN)  # held: a dropped one is closed
        assert await asyncio.wait_for(opening, 30) is not None
        xfer.close(0, b"done")
    finally:
        talking.cancel()
    assert not harness.lost


@pytest.mark.parametrize("talks", [False, True])
async def test_the_wait_for_a_transfer_connection_still_ends(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, talks: bool
) -> None:
    """A node silent on its control connection is gone after the deadline; one that talks
    but never gets a transfer connection through, after XFER_WAIT_DEADLINES of them (the
    message hints at an agent of another version, the likeliest cause on a rented node)."""
    monkeypatch.setattr(control, "XFER_WAIT_DEADLINES", 3)
    session = harness.session("r1", "tok", deadline_s=0.5)
    _, channel, _ = await harness.join(await harness.peer(), "r1", "tok")
    talking = asyncio.create_task(_talk(channel) if talks else asyncio.sleep(0))
    try:
        with pytest.raises(control.NodeGone) as gone:
            await asyncio.wait_for(session.open_bi(), 30)
    finally:
        talking.cancel()
    said = "none came within 1.5 s while the node talked" if talks else "node silent for 0.5 s"
    assert str(gone.value).startswith(said), gone.value


@pytest.mark.parametrize(
    ("deadline_s", "cap_s"),
    [(0.5, 3.0), (10.0, 60.0), (30.0, 60.0), (60.0, 60.0), (600.0, 600.0)],
)
def test_a_talking_nodes_transfer_wait_is_bounded_on_billed_pools(
    deadline_s: float, cap_s: float
) -> None:
    """Several deadlines on a short one (a local pool's busy machine), never past a minute
    unless one deadline is longer: a rented node is billed while it waits."""
    assert control.xfer_wait_cap_s(deadline_s) == cap_s
