"""The agent's life: join the orchestrator, obey it, survive losing it.

The agent dials its orchestrator (nodes may sit behind NAT), proves it belongs to
the run with the join token and obeys only the endpoint id it was started with — or
the one that later proved the run's re-attach credential (agent/reattach.py: the
engine that adopted the run after its owner died). The job is the thing of value:
when the control connection drops, the job keeps running and its events keep going
to the journal; the agent redials with capped exponential backoff and, once welcomed
again, replays what the orchestrator missed. A peer at the dialed address that is not
our orchestrator, or an engine that answers "unknown run" (it does not drive this run:
our owner died and another process now holds its address), changes nothing: the job
keeps running and the agent redials, waiting for its owner or an adopter. Only a node
that has been alone for `orphan_timeout` gives up (a node nobody owns must not bill
forever): it stops its job and releases itself (agent/orphan.py). A node given its run's
caps keeps its own meter (agent/budget.py) and releases itself the same way at the cap.
Either way, a run with a sink has its outputs put there first (agent/sinkhand.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from dataclasses import dataclass, replace
from enum import IntEnum
from pathlib import Path
from typing import Any

from iroh import iroh_ffi

from agent import budget, endpoint, facts, gpu, nodenotify, orphan, preflight, restart
from agent.journal import Journal
from agent.live import serve_live_stream
from agent.protocol import (
    CTL_ALPN,
    RESUME_ALPN,
    XFER_ALPN,
    BootReport,
    Channel,
    FrameTooLarge,
    Heartbeat,
    Hello,
    NodeFault,
    Park,
    Preflight,
    PreflightDone,
    ProtocolError,
    Reject,
    RunStep,
    Shutdown,
    SinkWork,
    StopStep,
    UseSink,
    Welcome,
    stand_in_for,
)
from agent.reattach import ResumeService, Target
from agent.redial import Backoff, describe, serve_xfer_forever
from agent.sinkhand import AT_CAP_UPLOAD_S, BEFORE_PARK_UPLOAD_S, SinkHand
from agent.supervisor import Supervisor
from agent.transfer import held

log = logging.getLogger("swjob.agent")

DIAL_TIMEOUT_S = 10.0
FLUSH_ON_EXIT_S = 2.0
ENDPOINT_CLOSE_S = 3.0
CLOSE_WAIT_S = 0.5
"""How long an exiting agent waits on its endpoint's close. Its peers are told at once;
the rest is QUIC's draining of each connection — for a dial to a dead orchestrator
abandoned at a take-over, the whole ENDPOINT_CLOSE_S — which an exiting process has no
use for (its events were acknowledged before: `_flush_sent`)."""
ORPHAN_CLOCK_TICK_S = 1.0  # the orphan clock re-reads the session state at least this often
STEP_RECORD = "step.pgid"  # the running step's record (agent/steprecord.py)
UNKNOWN_RUN = "unknown run"  # an engine's answer when it does not drive the run (control.py)


class NotMyOrchestrator(Exception):
    """The dialed peer is not the orchestrator we obey (or does not drive our run): redial."""


DIAL_ERRORS = (iroh_ffi.IrohError, TimeoutError, ProtocolError, OSError, NotMyOrchestrator)


class ExitCode(IntEnum):
    OK = 0
    REJECTED = 3
    ORPHANED = 5
    CAPPED = 6
    EXPIRED = 7  # kept warm for keep_warm_s and never claimed (agent/warm.py)


class JoinRefused(Exception):
    """Joining cannot succeed by retrying; the agent exits with `code`."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class AgentConfig:
    """The agent's command line. `heartbeat` is used only when Welcome leaves `heartbeat_s`
    unset (the orchestrator sets the pace); `deadline` is how long silence means lost."""

    run_id: str
    ticket: str
    orchestrator_id: str
    root: Path
    token: str
    reattach_id: str = ""  # the public half of the run's re-attach key pair
    grace: float = 10.0
    heartbeat: float = 1.0
    deadline: float = 10.0
    orphan_timeout: float = 1800.0
    on_orphan: str = "exit"  # one of orphan.ACTIONS
    vast_url: str = orphan.VAST_URL
    runpod_url: str = orphan.RUNPOD_URL
    installed: tuple[float | None, float | None] = (None, None)
    """When the on-start command began and finished installing the agent (node clock)."""
    budget: budget.Budget | None = None
    """The run's caps, price and billing start: the node's own meter (agent/budget.py)."""
    nice: int = 0
    """How far the node gives way to the operator's processes (agent/priority.py; local)."""

    @property
    def workdir(self) -> Path:
        return self.root / "work"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"


@dataclass
class _Session:
    conn: iroh_ffi.Connection
    stream: iroh_ffi.BiStream
    channel: Channel
    welcome: Welcome


class NodeAgent:
    """One run's agent: owns the endpoint, the journal and the supervisor."""

    def __init__(self, cfg: AgentConfig, ep: iroh_ffi.Endpoint | None = None) -> None:
        """`ep`: the process's endpoint when it outlives this run (a warm node's,
        agent/warm.py); None: bound, and closed, by `run`."""
        self.cfg = cfg
        self.parked: Park | None = None  # the run ended with Park: the node stays warm
        self.parked_at = 0.0
        for d in (cfg.workdir, cfg.logs_dir, cfg.state_dir):
            d.mkdir(exist_ok=True)  # in the root its provider made: never that root again
        self.journal = Journal(cfg.state_dir / "events.jsonl")
        if (lost := restart.interrupted(cfg.state_dir, STEP_RECORD)) is not None:
            self._note(lost)  # an earlier start of this node ran a step: it is gone
        credential = orphan.container_credential()  # a job that prints its environment shows it
        self.supervisor = Supervisor(
            cfg.workdir,
            cfg.logs_dir,
            self.journal.append,
            pgid_file=cfg.state_dir / STEP_RECORD,
            nice=cfg.nice,
            node_secrets=[*(credential[1:] if credential else ()), *nodenotify.secrets()],
        )
        self.shutdown = asyncio.Event()
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self.journal.subscribe(self._wake.set)
        self._sent = 0
        self._background: set[asyncio.Task[Any]] = set()
        self._ep = ep
        self._owns_ep = ep is None
        self._session: _Session | None = None
        self._target = restart.saved_target(cfg.state_dir, Target(cfg.orchestrator_id, cfg.ticket))
        self.resume = ResumeService(cfg.run_id, cfg.reattach_id, self._retarget)
        self._retargeted = asyncio.Event()
        self._alone_since: float | None = time.monotonic()  # None while a session is up
        self._operator_stopping = False  # told to stop its step or shut down
        self.sink = SinkHand(cfg.workdir, self.journal.append, self._spawn_background)

    async def run(self) -> ExitCode:
        """Serve until Shutdown, a refusal or orphanhood; the job is gone when this returns."""
        if self._ep is None:  # ours alone: we serve resume on it (else our owner routes it)
            key = restart.node_key(self.cfg.state_dir)  # the same node id after a restart
            self._ep = await endpoint.bind(accept=False, alpns=[RESUME_ALPN], secret_key=key)
            self._spawn_background(self.resume.serve(self._ep))
        serve = asyncio.create_task(self._serve())
        stop = asyncio.create_task(self.shutdown.wait())
        alone = asyncio.create_task(self._orphan_clock())
        capped = asyncio.create_task(self._cap_clock())
        self._spawn_background(gpu.sample_while(lambda: self.supervisor.busy, self.journal.append))
        try:
            await asyncio.wait({serve, stop, alone, capped}, return_when=asyncio.FIRST_COMPLETED)
            if serve.done():
                return serve.result()
            if capped.done():
                await self._release_at_cap(capped.result(), serve)
                return ExitCode.CAPPED
            if alone.done():
                log.error("no orchestrator for %.0f s: stopping the job", self.cfg.orphan_timeout)
                await cancel_within(ENDPOINT_CLOSE_S, serve)
                await self._give_up()
                return ExitCode.ORPHANED
            log.info("shutting down")
            await self.supervisor.stop(self.cfg.grace)
            await self._flush_sent(FLUSH_ON_EXIT_S)
            return ExitCode.OK
        finally:
            await cancel_within(ENDPOINT_CLOSE_S, serve, stop, alone, capped, *self._background)
            await self.supervisor.stop(self.cfg.grace)
            self.journal.close()
            if self._owns_ep:
                with contextlib.suppress(*DIAL_ERRORS):  # never let a stuck close keep us alive
                    async with asyncio.timeout(CLOSE_WAIT_S):
                        await self._ep.close()

    async def _orphan_clock(self) -> None:
        """Return once no control session has been up for `orphan_timeout` seconds.

        A clock of its own, not a check in the redial loop: whatever a dial, a join or a
        session's cleanup hangs on, a node nobody owns still gives up (it bills)."""
        while True:
            left = ORPHAN_CLOCK_TICK_S
            if self._alone_since is not None:
                left = self._alone_since + self.cfg.orphan_timeout - time.monotonic()
                if left <= 0:
                    return
            await asyncio.sleep(min(left, ORPHAN_CLOCK_TICK_S))

    async def _cap_clock(self) -> str:
        """Return the reason once the run's cap is the node's to enforce (agent/budget.py);
        never, on a node without one."""
        meter = self.cfg.budget
        if meter is None:
            await asyncio.Future()  # no cap to keep: wait for ever (until cancelled)
        assert meter is not None
        if meter.reported and self.cfg.on_orphan == "destroy-instance":  # Vast's start_date
            start = await asyncio.to_thread(budget.provider_start, self.cfg.vast_url)
            meter = replace(meter, since=budget.billing_start(start, meter.since))
        allowed = meter.allowance_s()
        log.info("keeping the run's cap: %.0f s of node life", allowed or 0)
        return await budget.reached(
            meter,
            alone=lambda: self._session is None,
            operator_stopping=lambda: self._operator_stopping,
            busy=lambda: self.supervisor.busy,
        )

    async def _release_at_cap(self, reason: str, serve: asyncio.Task[ExitCode]) -> None:
        """At the cap: stop the job, put its outputs in the sink (bounded: the cap is
        money), say so (to a connected operator too), release the node."""
        await self.supervisor.stop(self.cfg.grace)
        action = "destroying node" if self.cfg.on_orphan in orphan.DESTROYS else "exiting"
        self._note(f"{reason}: job stopped, {action}")
        if said := await self.sink.save_before_leaving(AT_CAP_UPLOAD_S):
            self._note(said)
        await nodenotify.tell(self.cfg, f"{reason}: job stopped", alone=self._session is None)
        await self._flush_sent(FLUSH_ON_EXIT_S)
        await cancel_within(ENDPOINT_CLOSE_S, serve)
        if self.cfg.on_orphan in orphan.DESTROYS:
            self._note(await asyncio.to_thread(self._destroy_own))

    async def save_before_parking(self) -> None:
        """A node kept warm may expire unclaimed (agent/warm.py): what its collection's
        upload did not put in the sink (the laptop took the outputs from the node) goes
        now, so nothing is left unsaved when it releases itself. Called once `run` returned:
        its session is over, so the engine's park (engine/run/warm.py, which waits PARK_S
        for that end) never waits on a slow store."""
        if self.sink.whole:
            return
        if said := await self.sink.save_before_leaving(BEFORE_PARK_UPLOAD_S):
            log.warning("%s", said)

    async def _serve(self) -> ExitCode:
        """Join and serve sessions until refused; redial with backoff whenever one is lost."""
        backoff = Backoff()
        while True:
            try:
                session = await self._join_unless_retargeted()
            except JoinRefused as exc:
                log.error("%s", exc)
                return exc.code
            except DIAL_ERRORS as exc:
                log.warning("join failed: %s", describe(exc))
            else:
                backoff.reset()
                await self._run_session(session)
            await self._pause(backoff.next(), backoff)

    async def _join_unless_retargeted(self) -> _Session:
        """Join; a dial to the old orchestrator (dead, so it may take the whole dial
        timeout) is dropped at once when an adopter retargets us."""
        join = asyncio.ensure_future(self._join())
        retarget = asyncio.ensure_future(self._retargeted.wait())
        try:
            await asyncio.wait({join, retarget}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            retarget.cancel()
            if not join.done():
                join.cancel()
            await asyncio.gather(join, retarget, return_exceptions=True)
        if join.cancelled():
            raise NotMyOrchestrator("the run was taken over while dialing: redialing")
        return join.result()

    async def _pause(self, delay: float, backoff: Backoff) -> None:
        """Wait `delay` before redialing, or less when an adopter just gave us its address."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._retargeted.wait()
        if self._retargeted.is_set():
            self._retargeted.clear()
            backoff.reset()

    def _retarget(self, target: Target) -> None:
        """An engine proved the run's re-attach credential: obey it from now on. A session
        with the previous orchestrator ends (its owner is gone, or it lost the run)."""
        self._target = target
        restart.save_target(self.cfg.state_dir, target)  # a restarted node dials it too
        self._retargeted.set()
        if self._session is not None:
            self._session.conn.close(0, b"run taken over")

    async def _give_up(self) -> None:
        """Orphaned: stop the job, put its outputs in the sink (when the run has one: nobody
        else will ever collect them), then (on Vast) destroy the own instance, saying so in
        the log and the journal first — the destroy may end this very process."""
        await self.supervisor.stop(self.cfg.grace)
        if said := await self.sink.save_before_leaving():
            self._note(said)
        await nodenotify.tell(self.cfg, f"orphaned for {self.cfg.orphan_timeout:g} s: job stopped")
        if self.cfg.on_orphan not in orphan.DESTROYS:
            return
        self._note(f"orphaned for {self.cfg.orphan_timeout:g} s: job stopped, destroying node")
        self._note(await asyncio.to_thread(self._destroy_own))

    def _destroy_own(self) -> str:
        """End the own rented node, the provider's way (blocking: run it in a thread)."""
        cfg = self.cfg
        return orphan.destroy_own(cfg.on_orphan, cfg.vast_url, cfg.runpod_url)

    def _note(self, text: str) -> None:
        log.error("%s", text)
        self.journal.append(NodeFault(seq=0, reason=text))

    async def _dial(self, alpn: bytes) -> iroh_ffi.Connection:
        """Connect to the orchestrator's address and make sure it is the one we obey."""
        assert self._ep is not None
        target = self._target
        addr = endpoint.addr_from_ticket(target.ticket)
        async with asyncio.timeout(DIAL_TIMEOUT_S):
            conn = await self._ep.connect(addr, alpn)
        remote = str(conn.remote_id())
        if remote != target.orchestrator_id:
            conn.close(1, b"not my orchestrator")
            raise NotMyOrchestrator(
                f"refusing peer {remote}: this agent obeys only {target.orchestrator_id}"
            )
        return conn

    async def _join(self) -> _Session:
        log.info("dialing orchestrator %s", self._target.orchestrator_id[:12])
        conn = await self._dial(CTL_ALPN)
        try:
            stream = await conn.open_bi()
            channel = Channel(stream.recv(), stream.send())
            facts_now = await asyncio.to_thread(facts.collect, self.cfg.root)
            hello = Hello(
                run_id=self.cfg.run_id,
                token=self.cfg.token,
                facts=facts_now,
                busy=self.supervisor.busy,
                last_seq=self.journal.last_seq,
                ticket=endpoint.ticket_of(self._ep),
                boot=BootReport(
                    install_started=self.cfg.installed[0],
                    install_ended=self.cfg.installed[1],
                    sent_at=time.time(),
                ),
            )
            await channel.send(hello)
            async with asyncio.timeout(self.cfg.deadline):
                reply = await channel.recv()
        except BaseException:
            conn.close(0, b"join failed")
            raise
        if isinstance(reply, Reject):
            conn.close(0, b"rejected")
            if reply.reason == UNKNOWN_RUN:
                raise NotMyOrchestrator(f"{UNKNOWN_RUN}: that engine does not drive this run")
            raise JoinRefused(ExitCode.REJECTED, f"rejected by orchestrator: {reply.reason}")
        if not isinstance(reply, Welcome):
            conn.close(0, b"protocol")
            raise ProtocolError(f"expected welcome, got {type(reply).__name__}")
        log.info("joined; replaying after seq %d", reply.replay_after)
        return _Session(conn, stream, channel, reply)

    async def _run_session(self, s: _Session) -> None:
        """Serve one control connection until it is lost; the job is not touched."""
        self._session = s
        self._alone_since = None
        self._sent = s.welcome.replay_after
        self._last_heard = time.monotonic()
        tasks = [
            asyncio.create_task(self._receive(s)),
            asyncio.create_task(self._send_events(s)),
            asyncio.create_task(self._heartbeat(s)),
            asyncio.create_task(self._watchdog()),
        ]
        workdir = self.cfg.workdir
        live = functools.partial(serve_live_stream, workdir)
        xfer = asyncio.create_task(serve_xfer_forever(self._dial, XFER_ALPN, workdir, live))
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and (exc := task.exception()) is not None:
                    log.warning("control connection lost: %s", describe(exc))
        finally:
            self._session = None
            self._alone_since = time.monotonic()
            await cancel_within(ENDPOINT_CLOSE_S, *tasks, xfer)
            s.conn.close(0, b"session over")

    async def _receive(self, s: _Session) -> None:
        while (msg := await s.channel.recv()) is not None:
            self._last_heard = time.monotonic()
            await self._handle(msg)
        log.warning("orchestrator closed the control stream")

    async def _handle(self, msg: object) -> None:
        if isinstance(msg, Heartbeat):
            self.journal.ack(msg.last_seq)
        elif isinstance(msg, RunStep):
            log.info("run step %s", msg.step)
            # what a warm node held of the previous run goes before any of this run's
            # processes could look at it (its unchanged files live on, linked, in work/)
            await asyncio.to_thread(held.release, self.cfg.workdir)
            await self.supervisor.start(msg.step, msg.command, self.sink.job_env(msg.env))
        elif isinstance(msg, StopStep):
            log.info("stop step (grace %.1f s)", msg.grace_s)
            self._operator_stopping = True
            self._spawn_background(self.supervisor.stop(msg.grace_s))
        elif isinstance(msg, Shutdown):
            self._operator_stopping = True
            self.shutdown.set()
        elif isinstance(msg, Park):
            log.info("run over: parking the node")
            self.parked, self.parked_at = msg, time.monotonic()  # its keep time runs from now
            self.shutdown.set()
        elif isinstance(msg, UseSink):
            self.supervisor.mask(msg.target.secret_access_key, msg.target.session_token or "")
            self.sink.use(msg.target, lambda: self.supervisor.busy)
        elif isinstance(msg, SinkWork):
            self.sink.work(msg)
        elif isinstance(msg, Preflight):
            self._spawn_background(self._preflight(msg))
        else:
            log.warning("ignoring unexpected %s message", type(msg).__name__)

    async def _preflight(self, request: Preflight) -> None:
        """Check the node against what its pool asked for (agent/preflight.py)."""
        checks = await preflight.run(request, self.cfg.workdir)
        self.journal.append(PreflightDone(seq=0, checks=checks))

    async def _send_events(self, s: _Session) -> None:
        """Drain the journal to the wire in seq order: replay first, then live events."""
        while True:
            self._wake.clear()
            batch = self.journal.events_after(self._sent)
            if not batch:
                await self._wake.wait()
                continue
            for event in batch:
                try:
                    await s.channel.send(event)
                except FrameTooLarge as exc:
                    log.error("event %d too large to send: %s", event.seq, exc)
                    await s.channel.send(stand_in_for(event, exc))
                self._sent = event.seq
                self._progress.set()

    async def _heartbeat(self, s: _Session) -> None:
        welcome = s.welcome
        explicit = "heartbeat_s" in welcome.model_fields_set
        interval = welcome.heartbeat_s if explicit else self.cfg.heartbeat
        while True:  # the first after an interval: the hello has just been heard
            await asyncio.sleep(interval)
            await s.channel.send(Heartbeat(last_seq=self.journal.last_seq))

    async def _watchdog(self) -> None:
        """Return (ending the session) once the orchestrator has been silent past the deadline."""
        while (left := self._last_heard + self.cfg.deadline - time.monotonic()) > 0:
            await asyncio.sleep(left)
        log.warning("orchestrator silent for %.1f s: connection lost", self.cfg.deadline)

    async def _flush_sent(self, timeout: float) -> None:
        """Deliver the last events (e.g. the stopped StepExited) before exit, within `timeout`.

        Closing a QUIC connection drops unacknowledged stream data, so the stream is
        finished and we wait for the peer to acknowledge it (`stopped()`).
        """
        s = self._session
        if s is None:
            return
        with contextlib.suppress(*DIAL_ERRORS):
            async with asyncio.timeout(timeout):
                while self._sent < self.journal.last_seq:
                    self._progress.clear()
                    await self._progress.wait()
                await s.channel.finish()  # later sends (a heartbeat) are dropped
                await s.stream.send().stopped()

    def _spawn_background(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


async def cancel_within(timeout: float, *tasks: asyncio.Task[Any]) -> None:
    """Cancel `tasks` and wait at most `timeout` for them to end: a task that does not
    end when cancelled (an FFI call deaf to it) is logged and left, never waited on."""
    for task in tasks:
        task.cancel()
    ended, stuck = await asyncio.wait(tasks, timeout=timeout) if tasks else (set(), set())
    for task in ended:
        if not task.cancelled():
            task.exception()  # retrieved: their failures were logged where they happened
    for task in stuck:
        log.warning("task %s did not end %g s after its cancel", task.get_name(), timeout)
