"""The orchestrator's control service: admits nodes, keeps their channels, watches liveness.

A node dials us (CTL_ALPN), proves it belongs to a run with that run's single-use
join token, and from then on is known by its iroh endpoint id: a rejoin after a dropped
connection must come from the same id, and the transfer connection (XFER_ALPN; it also
carries the shell's and port forwards' streams) is accepted only from an admitted id.
Anyone else is refused and logged. Liveness is application-level: silence past the
deadline is NodeLost, since QUIC itself notices a dead peer only after its ~35 s idle
timeout.

A peer not yet admitted is held short: its hello must come within HELLO_TIMEOUT_S in a
frame of at most HELLO_MAX_FRAME bytes, and only so many such peers may wait at once
(`peergate`), so strangers cannot make the engine hold memory. What a stranger said
(its run id) is logged with control characters made visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Callable
from typing import Any

from agent.protocol import (
    CODE_ALPN,
    CTL_ALPN,
    MAX_FRAME,
    XFER_ALPN,
    AgentEvent,
    Channel,
    Heartbeat,
    Hello,
    NodeFacts,
    Reject,
    Welcome,
)
from engine.report.printable import visible
from engine.run.codeserve import serve_code
from engine.run.liveops import LiveLink
from engine.run.paused import DeadlinePassed, RunningDeadline
from engine.run.peergate import PeerGate

log = logging.getLogger("swjob.control")

HELLO_TIMEOUT_S = 5.0
HELLO_MAX_FRAME = 64 * 1024
TALKING_BEATS = 3  # heartbeats a node may miss and still be taken as talking
XFER_WAIT_DEADLINES = 6  # a talking node's transfer connection may take this many deadlines
XFER_WAIT_CAP_S = 60.0  # ... but no longer than this (or one deadline) on a billed node


def xfer_wait_cap_s(deadline_s: float) -> float:
    """How long a talking node's transfer connection is waited for: several deadlines on
    a short one (a local pool's 10 s, while a hundred nodes join a busy machine), never
    past a minute, or one deadline where that is longer (a rented pool's 60 s: a node
    billed while an agent of another version talks but can never serve transfers)."""
    return min(deadline_s * XFER_WAIT_DEADLINES, max(deadline_s, XFER_WAIT_CAP_S))


class NodeGone(Exception):
    """The node is not connected and did not come back within the deadline."""


class NodeSession:
    """One run's node as the orchestrator sees it."""

    def __init__(
        self,
        run_id: str,
        token: str,
        *,
        heartbeat_s: float,
        deadline_s: float,
        on_event: Callable[[AgentEvent], None],
        on_lost: Callable[[str], None],
    ) -> None:
        self.run_id = run_id
        self._token = token
        self.heartbeat_s = heartbeat_s
        self.deadline_s = deadline_s
        self._on_event = on_event
        self._on_lost = on_lost
        self.endpoint_id: str | None = None
        self.hello: Hello | None = None  # the node's latest (re)join: facts, busy, journal end
        self.last_seq = 0  # the newest node event delivered (recovery sets it from the log)
        self.joined = asyncio.Event()
        self._channel: Channel | None = None
        self._connected = asyncio.Event()
        self._ended = asyncio.Event()  # the node ended the current connection (`ended_by_node`)
        self._xfer: Any = None
        self._xfer_ready = asyncio.Event()
        self._conns: list[Any] = []
        self.live = LiveLink(self.open_bi)  # shell, port forwarding: engine/run/liveops.py
        self._silence = RunningDeadline(deadline_s)  # since the node was last heard
        self._hearing: set[RunningDeadline] = set()  # waits the node's word puts off
        self._fresh = asyncio.Event()  # the node was heard (cleared by `answers`)
        self._tasks: set[asyncio.Task[None]] = set()
        self._watchdog: asyncio.Task[None] | None = None
        self.closed = False
        self._twin_joined = False  # a second agent came with this run's token (refused)

    def pace(self, heartbeat_s: float, deadline_s: float) -> None:
        """Take another pool's heartbeat and silence deadline: its run moved there before
        its node joined (engine/run/fallover.py); nothing is watching the silence yet."""
        self.heartbeat_s, self.deadline_s = heartbeat_s, deadline_s
        self._silence = RunningDeadline(deadline_s)

    async def answers(self) -> bool:
        """Whether the node's agent is heard afresh within a few heartbeats: whatever a
        provider's listing says, such a node is alive. (A node heard a moment ago is not
        enough: one that just died is still within its deadline.)"""
        if self.closed or not self.joined.is_set():
            return False
        self._fresh.clear()
        window = min(self.deadline_s, TALKING_BEATS * self.heartbeat_s)
        try:
            async with asyncio.timeout(window):
                await self._fresh.wait()
        except TimeoutError:
            return False
        return not self.closed

    @property
    def facts(self) -> NodeFacts | None:
        return self.hello.facts if self.hello else None

    # ---- admission -----------------------------------------------------------------

    def admits(self, hello: Hello, remote_id: str) -> str | None:
        """None when this peer may join; otherwise the reason it is refused."""
        if self.closed:
            return "run is over"
        if not hmac.compare_digest(hello.token.encode(), self._token.encode()):
            return "wrong join token"
        if self.endpoint_id is not None and self.endpoint_id != remote_id:
            self._twin_joined = True
            return "join token already used by another node"
        return None

    async def rearm(self, token: str) -> None:
        """The joined node is being destroyed before the run's end (it failed its host
        pre-flight): forget it — its connections, its liveness watch, its journal's place —
        and admit only the next node, which comes with `token`."""
        tasks = [*self._tasks, *([self._watchdog] if self._watchdog else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._watchdog = None
        for conn in self._conns:
            with contextlib.suppress(Exception):
                conn.close(0, b"node replaced")
        self._conns = []
        self._channel = self._xfer = None
        self._connected.clear()
        self._xfer_ready.clear()
        self.joined.clear()
        self._token = token
        self.endpoint_id = self.hello = None
        self.last_seq = 0
        self._twin_joined = False

    def may_fetch_code(self, token: str) -> bool:
        """Whether a node asking for the agent's code with `token` is this run's, before its
        agent has joined (the code is public; the check keeps strangers from making the
        engine send it, and asking does not spend the token)."""
        fits = hmac.compare_digest(token.encode(), self._token.encode())
        return fits and not self.closed and self.endpoint_id is None

    async def attach(self, conn: Any, channel: Channel, hello: Hello, remote_id: str) -> None:
        self.endpoint_id = remote_id
        self.hello = hello
        self._xfer = None  # a rejoined agent dials its transfers anew: an old connection's
        self._xfer_ready.clear()  # streams would wait out its idle timeout (a restart's)
        await channel.send(Welcome(replay_after=self.last_seq, heartbeat_s=self.heartbeat_s))
        self._channel = channel
        self._conns.append(conn)
        self._heard()
        self._ended.clear()
        self._connected.set()
        self.joined.set()
        self._spawn(self._read(channel))
        self._spawn(self._beat(channel))
        if self._watchdog is None:
            self._watchdog = asyncio.create_task(self._watch())

    def attach_xfer(self, conn: Any) -> None:
        self._xfer = conn
        self._conns.append(conn)
        self._xfer_ready.set()

    # ---- talking to the node --------------------------------------------------------

    async def send(self, msg: Any) -> None:
        """Send a control message, waiting (up to the deadline) for a dropped node to rejoin."""
        for _ in range(2):
            channel = await self._wait_for(self._connected, lambda: self._channel)
            try:
                await channel.send(msg)
                return
            except Exception as exc:  # the connection died under us: wait for a rejoin
                log.info("send to %s failed: %s", self.run_id, exc)
                self._drop(channel)
        raise NodeGone("node did not accept the message")

    async def ended_by_node(self) -> None:
        """Return once the node has ended its control connection. After a message that
        makes the node leave (`Park`), this is its word that the message arrived: a message
        we wrote may still sit in our send buffer, and closing the connection ourselves
        (the run's end) drops it — QUIC discards unsent stream data at a close."""
        await self._ended.wait()

    async def open_bi(self) -> Any:
        """XferLink: a stream on the node's current transfer connection. A node heard on
        its control connection is alive: its transfer dial is only late (a hundred nodes
        joining at once on a busy machine fail handshakes and back off), so the wait for
        one runs out only once the node too has been silent for the deadline — or, for a
        node that talks but never gets a transfer connection through, at `xfer_wait_cap_s`."""
        conn = await self._wait_for(self._xfer_ready, lambda: self._xfer, while_heard=True)
        try:
            return await conn.open_bi()
        except Exception:
            if self._xfer is conn:
                self._xfer = None
                self._xfer_ready.clear()
            raise

    async def _wait_for(
        self, flag: asyncio.Event, get: Callable[[], Any], *, while_heard: bool = False
    ) -> Any:
        """`get()` once `flag` is set (at once when it is: every send and transfer stream
        asks, and a deadline's wait costs a task and a timer each time). `while_heard`:
        the deadline starts over whenever the node is heard, within `xfer_wait_cap_s`."""
        if not flag.is_set():  # in this process's running time: our pause is not the node's
            await self._wait_set(flag, while_heard)
        value = get()
        if value is None or self.closed:
            raise NodeGone("node connection closed")
        return value

    async def _wait_set(self, flag: asyncio.Event, while_heard: bool) -> None:
        """Return once `flag` is set; NodeGone when the deadline (or the cap) passes first."""
        quiet = RunningDeadline(self.deadline_s)
        if not while_heard:
            try:
                await quiet.wait(flag.wait())
                return
            except DeadlinePassed:
                raise NodeGone(f"node not connected for {self.deadline_s:g} s") from None
        cap = RunningDeadline(xfer_wait_cap_s(self.deadline_s))
        self._hearing.add(quiet)
        try:
            await cap.wait(self._while_heard(quiet, flag))
        except DeadlinePassed:
            raise NodeGone(
                f"none came within {cap.seconds:g} s while the node talked"
                " (is its agent another swjob version?)"
            ) from None
        finally:
            self._hearing.discard(quiet)

    async def _while_heard(self, quiet: RunningDeadline, flag: asyncio.Event) -> None:
        """`flag`'s wait under `quiet`, whose passing is the node falling silent: said as
        such here, before the cap's wait could take it for its own."""
        try:
            await quiet.wait(flag.wait())
        except DeadlinePassed:
            raise NodeGone(f"node silent for {self.deadline_s:g} s") from None

    # ---- background work ----------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _heard(self) -> None:
        self._silence.restart()
        for wait in self._hearing:
            wait.restart()
        self._fresh.set()

    def _drop(self, channel: Channel) -> None:
        if self._channel is channel:
            self._channel = None
            self._connected.clear()
            self._ended.set()

    async def _read(self, channel: Channel) -> None:
        try:
            while (msg := await channel.recv()) is not None:
                self._heard()
                seq = getattr(msg, "seq", None)
                if seq is None:
                    continue  # heartbeats only prove liveness
                if seq <= self.last_seq:
                    continue  # a replayed event we already have
                self.last_seq = seq
                self._on_event(msg)
                await asyncio.sleep(0)  # let the UI run between frames of a flood
        except Exception as exc:
            log.info("control channel of %s ended: %s", self.run_id, exc)
        finally:
            self._drop(channel)

    async def _beat(self, channel: Channel) -> None:
        """A heartbeat every `heartbeat_s`, the first one `heartbeat_s` after the welcome,
        which told the node as much (it is heard, and `replay_after` is what a beat's
        `last_seq` says): a beat at once cost every run a message each way."""
        with contextlib.suppress(Exception):
            while True:
                await asyncio.sleep(self.heartbeat_s)
                if self._channel is not channel:  # dropped or replaced meanwhile
                    return
                await channel.send(Heartbeat(last_seq=self.last_seq))

    async def _watch(self) -> None:
        """Post the loss once the node has been silent past the deadline. Silence counts
        only while this process ran: one stopped (Ctrl-Z, SIGSTOP) or starved could read
        none of the heartbeats the node sent meanwhile (engine/run/paused.py)."""
        await self._silence.passed()
        if not self.closed:
            reason = f"no heartbeat for {self.deadline_s:g} s"  # "0.5 s", not "0 s"
            if self._twin_joined:  # what a container restart looks like: its on-start again
                reason += "; another agent had come with this run's join token (a restart?)"
            self._on_lost(reason)

    async def close(self) -> None:
        self.closed = True
        tasks = [*self._tasks, *([self._watchdog] if self._watchdog else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for conn in self._conns:
            with contextlib.suppress(Exception):
                conn.close(0, b"run over")
        self._connected.set()
        self._xfer_ready.set()


class ControlServer:
    """Accepts every incoming connection of the engine's endpoint and routes it to a run."""

    def __init__(self, endpoint: Any) -> None:
        self._endpoint = endpoint
        self.sessions: dict[str, NodeSession] = {}
        self._task: asyncio.Task[None] | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self.gate = PeerGate()

    def start(self) -> None:
        self._task = asyncio.create_task(self._serve())

    async def stop(self) -> None:
        for task in [*self._handlers, *([self._task] if self._task else [])]:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._task:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _serve(self) -> None:
        while (incoming := await self._endpoint.accept_next()) is not None:
            task = asyncio.create_task(self._handle(incoming))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    async def _handle(self, incoming: Any) -> None:
        try:
            accepting = await incoming.accept()
            alpn = await accepting.alpn()
            conn = await accepting.connect()
        except Exception as exc:
            log.info("incoming connection failed: %s", exc)
            return
        remote = str(conn.remote_id())
        if alpn == CTL_ALPN:
            await self._admit_gated(conn, remote)
        elif alpn == XFER_ALPN:
            self._route(conn, remote, NodeSession.attach_xfer)
        elif alpn == CODE_ALPN:
            await serve_code(conn, remote, self.sessions, self.gate)
        else:
            conn.close(1, b"unknown service")

    async def _admit_gated(self, conn: Any, remote: str) -> None:
        refused = self.gate.enter(remote)
        if refused is not None:
            log.info("refused peer %s: %s", remote[:16], refused)
            conn.close(4, b"busy")
            return
        try:
            await self._admit(conn, remote)
        finally:
            self.gate.leave(remote)

    async def _admit(self, conn: Any, remote: str) -> None:
        try:
            async with asyncio.timeout(HELLO_TIMEOUT_S):
                bi = await conn.accept_bi()
                channel = Channel(bi.recv(), bi.send(), max_frame=HELLO_MAX_FRAME)
                hello = await channel.recv()
        except Exception as exc:
            log.warning("refused peer %s: no valid hello (%s)", remote[:16], exc)
            conn.close(2, b"no hello")
            return
        if not isinstance(hello, Hello):
            log.warning("refused peer %s: first message was not hello", remote[:16])
            conn.close(2, b"no hello")
            return
        session = self.sessions.get(hello.run_id)
        reason = "unknown run" if session is None else session.admits(hello, remote)
        if session is None or reason is not None:
            run_id = visible(hello.run_id[:80])
            log.warning("refused peer %s for run %s: %s", remote[:16], run_id, reason)
            with contextlib.suppress(Exception):
                await channel.send(Reject(reason=reason or "refused"))
                await bi.send().finish()
            with contextlib.suppress(Exception):  # let the peer read the reject and hang up
                async with asyncio.timeout(2.0):
                    await conn.closed()
            conn.close(3, b"refused")
            return
        channel.allow_frames(MAX_FRAME)
        await session.attach(conn, channel, hello, remote)

    def _route(self, conn: Any, remote: str, attach: Callable[[NodeSession, Any], None]) -> None:
        """A side connection (transfers, live streams) belongs to the run whose node is
        `remote`."""
        for session in self.sessions.values():
            if session.endpoint_id == remote and not session.closed:
                attach(session, conn)
                return
        log.warning("refused side connection from unadmitted peer %s", remote[:16])
        conn.close(3, b"not admitted")
