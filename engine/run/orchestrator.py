"""Drives one run: observed events go into the pure FSM, its commands meet the world here.

The driver owns a queue of observed events. Each FSM outcome's commands run in order
inside one task (so "collect best-effort, then tear down" keeps its order), while the
loop goes on consuming events — a stop can arrive while a command is in flight.
TeardownNode cancels whatever else is in flight first: it is the one command that
must always run to the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from agent import nodenotify
from agent.protocol import (
    AgentEvent,
    GpuMetrics,
    LogBatch,
    LogLine,
    NodeFault,
    PreflightDone,
    RunStep,
    Shutdown,
    SinkDone,
    SinkProgress,
    Step,
    StepExited,
    StopStep,
)
from agent.redact import Redactor
from agent.restart import RESTARTED
from engine.errors import one_line
from engine.jobs.jobspec import JobSpec
from engine.jobs.pools import Pool
from engine.providers.base import (
    Bootstrap,
    Listed,
    NodeHandle,
    PoolExhausted,
    Provider,
    heartbeat_for,
    silence_for,
)
from engine.report import appender, scope
from engine.report import events as ev
from engine.report.datastream import Datastream
from engine.report.gpu import IdleGpuWatch, duration, gpu_summary
from engine.report.runbook import apply
from engine.report.views import RunView
from engine.run import attempts, fallover, fsm, nodeloss, warm
from engine.run.attempts import Attempt
from engine.run.bootmarks import BootMarks
from engine.run.control import NodeGone, NodeSession
from engine.run.costmeter import CostMeter
from engine.run.paused import DeadlinePassed, RunningDeadline
from engine.run.preflight import PreflightCheck
from engine.run.runrecord import LogFiles, PhaseClock, run_summary, write_summary
from engine.run.runsupport import Transfers
from engine.run.sinkwork import SinkLink
from engine.run.teardown import destroy

SHUTDOWN_TIMEOUT_S = 5.0
REASON_MAX = 300
CANCEL_WAIT_S = 3.0
WHY_NOT_JOINED_S = 10.0  # one provider look at a node that did not join


class RunDriver:
    def __init__(
        self,
        *,
        view: RunView,
        job: JobSpec,
        pool: Pool,
        provider: Provider,
        session: NodeSession,
        bootstrap: Bootstrap,
        stream: Datastream,
        stop_grace_s: float,
        on_change: Any,
        attempt: Attempt | None = None,
        endpoint: Any = None,
        pools: fallover.PoolSource | None = None,
    ) -> None:
        """`endpoint`: the engine's, to claim a warm node with (None: never claims one);
        `pools`: the engine's, to fall over to another pool with (None: never does)."""
        self.view = view
        self.job = job
        self.pool = pool
        self.attempt = attempt  # None: a first attempt (or one recovered after a crash)
        self._provider = provider
        self.session = session
        self._bootstrap = bootstrap
        self._stream = stream
        self._grace = stop_grace_s
        self._on_change = on_change
        self.sink = SinkLink(self)
        node_notify = nodenotify.secrets(bootstrap.notify)  # the node's notify targets
        self.redact = Redactor([*job.secrets(), *self.sink.secrets(), *node_notify])
        self._queue: asyncio.Queue[fsm.Event] = asyncio.Queue()
        self._fsm = fsm.FsmState()
        self._work: set[asyncio.Task[None]] = set()
        self._watch: asyncio.Task[None] | None = None
        self.handle: NodeHandle | None = None
        self._running_step: Step | None = None
        self._step_exited = asyncio.Event()
        self.clock = PhaseClock()
        self.boot = BootMarks(self)
        self.logs = LogFiles(view.run_dir / "logs")
        self.transfers = Transfers(self)
        self._cost = CostMeter(self)
        self.outputs: dict[str, Any] = {}
        self.recovery: dict[
            str, Any
        ] = {}  # what a restarted engine needs; see engine/run/recovery.py
        self.started: set[str] = set()
        self.lost = False
        self.workspace_refused: list[str] = []
        self._endpoint = endpoint
        self.pools = pools
        self.cold = False  # rent a fresh node even when a warm one fits (`swjob run --cold`)
        self.healthy = True  # no fault, loss, internal error or cap seen: may be kept warm
        self.birth_run = view.run_id  # the run its node was provisioned for (warm reuse)
        self.pushed: list[dict[str, Any]] = []  # run.json's `push`: one row per tree pushed
        self.preflight = PreflightCheck(self)  # the host pre-flight of each node rented
        self._gpu_idle = IdleGpuWatch(pool.idle_gpu_alert_s, pool.idle_gpu_util_pct)
        self._gpu_stop = IdleGpuWatch(pool.idle_gpu_stop_s or math.inf, pool.idle_gpu_util_pct)
        self.begin()  # queued first, so a stop that arrives before the loop starts finds a job

    def begin(self) -> None:
        """Submit the job to the FSM: a new run, or one indexed but never begun."""
        attempt = self.attempt
        carries = attempt is not None and attempt.carried is not None
        carries |= attempt is not None and attempt.previous is not None and bool(self.sink.place)
        workspace = self.job.workspace is not None or carries
        self.post(fsm.JobSubmitted(self.job.setup is not None, workspace))

    # ---- the loop ---------------------------------------------------------------------

    def post(self, event: fsm.Event) -> None:
        if warm.unhealthy(event):
            self.healthy = False
        self._queue.put_nowait(event)

    def publish(self, event: ev.Event) -> None:
        event = self._stream.publish(event)
        self.view = apply(self.view, event)
        self._on_change(self, event)

    def remember(self, **facts: Any) -> None:
        """Persist recovery facts at once (a crash right after must not lose them)."""
        self.recovery.update(facts)
        self._on_change(self, None)

    async def run(self) -> RunView:
        try:
            while not self._fsm.finished:
                self._advance(await self._queue.get())
        finally:
            await self._cancel_work(keep=None)
            self._cost.stop()
            await self.session.close()
            await self.logs.aclose()
        self._finish()
        return self.view

    def _advance(self, event: fsm.Event) -> None:
        before = self._fsm
        outcome = fsm.step(before, event)
        if outcome.ignored:
            return
        self._fsm = outcome.state
        self.clock.enter(outcome.state.phase.value)
        self.publish(
            ev.Transition(
                run_id=self.view.run_id,
                cause=fsm.name(event),
                from_state=before.state.value if before.state else None,
                to_state=outcome.state.state.value if outcome.state.state else "PENDING",
                from_phase=before.phase.value,
                to_phase=outcome.state.phase.value,
                commands=[fsm.name(c) for c in outcome.commands],
                reason=self.redact(outcome.state.reason) if outcome.state.reason else None,
                exit_code=outcome.state.exit_code,
            )
        )
        stop_or_loss = isinstance(event, fsm.OperatorStop | fsm.NodeLost)
        if stop_or_loss and before.phase is fsm.Phase.COLLECTING:
            # the verdict stands (the exit code decided it); say why collection was cut
            # short, and record it for every output that did not land
            why = self.redact(fsm.reason_of(event) or "stopped")
            self.transfers.cut_short(why)
            self.publish(
                ev.Alert(run_id=self.view.run_id, message=f"output collection cut short: {why}")
            )
        if outcome.commands:
            self._spawn(self._execute(outcome.commands))

    def resume(
        self, state: fsm.FsmState, handle: NodeHandle | None, node_end: float | None = None
    ) -> None:
        """Continue a run an earlier engine process left unfinished: start from `state`
        instead of JobSubmitted (engine/run/recovery.py re-issues the interrupted command).
        `node_end`: the latest its node can have lived unattended (engine/run/nodeend.py),
        which bounds its cost until its agent is heard again."""
        self._queue = asyncio.Queue()
        self._fsm = state
        self.handle = handle
        if handle is not None:
            self._cost.end_by(node_end)
            self._cost.start(handle)  # the node has billed all along: cost counts from its birth

    def start_work(self, coro: Any) -> asyncio.Task[Any]:
        """Run `coro` beside the FSM. A teardown may cancel it before it ever ran (a run
        recovered in teardown): it is closed then, or Python warns on the user's terminal
        that it was never awaited."""
        task = self._spawn(self._guarded(coro))
        task.add_done_callback(lambda _: coro.close())
        return task

    @property
    def fsm_state(self) -> fsm.FsmState:
        return self._fsm

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        context = contextvars.copy_context()  # the provider's alerts name this run
        context.run(scope.work_for, self.view.run_id, self.boot.reached)
        task = asyncio.create_task(coro, context=context)
        self._work.add(task)
        task.add_done_callback(self._work.discard)
        return task

    async def _cancel_work(self, keep: asyncio.Task[Any] | None) -> None:
        others = [t for t in (*self._work, self._watch) if t is not None and t is not keep]
        for task in others:
            task.cancel()
        if others:
            # bounded: a transfer read from a frozen node was seen to ignore its cancel until
            # the connection closed (30 s); the teardown that follows closes it for good
            await asyncio.wait(others, timeout=CANCEL_WAIT_S)

    async def _execute(self, commands: tuple[fsm.Command, ...]) -> None:
        """Carry out one outcome's commands in order; after one raised, the rest is abandoned
        (the FSM orders what comes next on its InternalError). The transition that ordered
        them is on record first: killed while a command works, the operator leaves a
        journal that says what was under way."""
        await appender.written()
        for command in commands:
            if not await self._guarded(self._carry_out(command)):
                return

    async def _guarded(self, work: Awaitable[None]) -> bool:
        """Await `work`; whatever it raises becomes an InternalError event (False), so no
        exception can leave a run stuck in a phase while its node bills."""
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            line = one_line(exc)  # bounded: an OSError may quote a 4 KiB path
            line = line if len(line) <= REASON_MAX else line[: REASON_MAX - 1] + "…"
            reason = self.redact(f"internal error: {line}")
            self.publish(ev.Alert(run_id=self.view.run_id, message=reason))
            self.post(fsm.InternalError(reason))
            return False
        return True

    async def _carry_out(self, command: fsm.Command) -> None:
        match command:
            case fsm.ProvisionNode():
                await self._provision()
            case fsm.MaterializeWorkspace():
                await self.transfers.push()
            case fsm.RunSetup():
                await self.start_step(Step.SETUP, self.job.setup or "")
            case fsm.RunJob():
                await self.start_step(Step.RUN, self.job.run)
                self.transfers.live.start()
            case fsm.CollectOutputs(best_effort=best_effort):
                self.outputs = await self.transfers.pull(best_effort)
            case fsm.TeardownNode():
                await self.teardown()

    # ---- commands ---------------------------------------------------------------------

    async def _provision(self) -> None:
        """Provision on the run's pool."""
        await self.falling_over(self._provision_here)

    async def falling_over(self, work: Callable[[], Awaitable[None]]) -> None:
        """Await `work` (renting a node, or readying one that joined: its pre-flight may
        rent the next offer); a pool with nothing left for the run (PoolExhausted, whoever
        raised it while provisioning) passes the run to its next fallback pool, where it
        provisions anew."""
        while True:
            try:
                await work()
                return
            except PoolExhausted as exc:
                self.handle = None  # whoever raised it let go of any node the pool gave
                failed = await fallover.fall_over(self, self.redact(one_line(exc)))
                if failed is not None:
                    self.post(fsm.NodeFault(failed))
                    return
                work = self._provision_here

    async def _provision_here(self) -> None:
        try:
            self.handle = await self._warm_or_new()
        except (asyncio.CancelledError, PoolExhausted):
            raise
        except Exception as exc:
            self.post(fsm.NodeFault(f"provisioning failed: {self.redact(str(exc))}"))
            return
        self.remember(handle=dataclasses.asdict(self.handle))
        self._cost.start(self.handle)
        self._node_event(ev.NodeState.PROVISIONING)
        timeout_s = self.pool.boot_timeout_s
        if await self.await_join(timeout_s, ev.NodeState.READY):
            await self.after_join()
            return
        said = f"boot timeout: node did not join within {timeout_s:g} s"
        with contextlib.suppress(Exception):  # what the provider sees of it, if it can say
            async with asyncio.timeout(WHY_NOT_JOINED_S):
                if why := await self._provider.why_not_joined(self.handle):
                    said += f" ({self.redact(why)})"
        self.post(fsm.NodeFault(said))

    def seat(self, pool: Pool, provider: Provider, heartbeat_s: float) -> None:
        """Provision on `pool` from now on (engine/run/fallover.py): its provider, the caps
        the attempt has left there, its deadlines and idle-GPU watches. No node of the run
        has joined yet: nothing else holds the pool it leaves."""
        self.pool = attempts.capped(pool, self.attempt)
        self._provider = provider
        self._bootstrap = dataclasses.replace(
            self._bootstrap,
            silence_s=silence_for(pool.node_lost_after_s),
            orphan_timeout_s=pool.orphan_timeout_s,
            max_dollars=self.pool.caps.max_dollars,
            max_hours=self.pool.caps.max_hours,
        )
        lost_after = pool.node_lost_after_s
        self.session.pace(heartbeat_for(heartbeat_s, lost_after), lost_after)
        self._gpu_idle = IdleGpuWatch(pool.idle_gpu_alert_s, pool.idle_gpu_util_pct)
        self._gpu_stop = IdleGpuWatch(pool.idle_gpu_stop_s or math.inf, pool.idle_gpu_util_pct)

    async def _warm_or_new(self) -> NodeHandle:
        """A warm node of the pool when one fits and takes the run, else a new one."""
        self.preflight.offers_left()  # OffersUsedUp: the pool's offers failed pre-flight
        if self._endpoint is not None and self.pool.keep_warm_s > 0 and not self.cold:
            taken = await warm.claim(self._endpoint, self._provider, self.pool, self._bootstrap)
            if taken is not None:
                handle, self.birth_run = taken
                self.remember(birth_run=self.birth_run)  # an adopter parks it under it too
                return handle
        return await self._provider.provision(self._bootstrap)

    async def after_join(self) -> None:
        """What comes between a node's join and its use, whoever waited for the join (the
        rent here, or an engine that adopted the run: engine/run/recovery.py). While the run
        provisions: the host pre-flight (once per node, engine/run/preflight.py), a failed
        node replaced by the next offer (through `_provision_here`: a PoolExhausted reaches
        `falling_over`), then the sink and NodeReady. Past provisioning (a rejoin after an
        adoption): the sink again, only."""
        provisioning = self._fsm.phase is fsm.Phase.PROVISIONING
        if provisioning and not await self.preflight.passed():
            await self._provision_here()  # destroyed: the next offer, or no more
            return
        await self.hand_over_sink()
        if provisioning:
            self.post(fsm.NodeReady())

    async def hand_over_sink(self) -> None:
        """Give a joined node the run's sink (again after an adoption: a node that has it
        keeps the first; one whose agent restarted gets it back)."""
        try:
            await self.sink.hand_over()
        except NodeGone as exc:
            self.post(fsm.NodeLost(str(exc)))

    async def await_join(self, timeout_s: float, state: ev.NodeState) -> bool:
        """Watch the node (liveness) and wait for its agent to join; False on timeout."""
        assert self.handle is not None
        self._watch = asyncio.create_task(self._watch_node(self.handle))
        try:  # in this process's running time: a node that joined while we were stopped
            await RunningDeadline(timeout_s).wait(self.session.joined.wait())
        except DeadlinePassed:
            return False
        hello = self.session.hello
        self._cost.end_by(None)  # its agent spoke: the node is alive and bills on
        self.remember(endpoint_id=self.session.endpoint_id, agent_ticket=hello and hello.ticket)
        self.boot.joined(hello and hello.boot)
        self._node_event(state)
        return True

    async def _watch_node(self, handle: NodeHandle) -> None:
        """The provider's confirmed word that the node died, weighed against its agent's
        heartbeat: a node whose agent still talks is not lost because a listing no longer
        shows it, and one the provider says died (exited, stopped, taken back) while its
        agent answers has its files pulled before it is torn down."""
        said = False
        while True:
            verdict = await self._provider.node_exited(handle)
            if not isinstance(verdict, Listed) or not await self.session.answers():
                break  # seen dead, or the agent fell silent too
            if not verdict.gone:
                self.post(fsm.NodeGoing(fsm.reason_of(nodeloss.loss_event(verdict)) or ""))
                return
            if not said:
                said = True
                message = f"{verdict.reason}, says its provider; its agent still talks: going on"
                self.publish(ev.Alert(run_id=self.view.run_id, message=message))
        self.lost = True
        self.post(nodeloss.loss_event(verdict))

    async def start_step(self, step: Step, command: str) -> None:
        self._node_event(ev.NodeState.BUSY)
        self.expect_exit(step)
        self.started.add(step.value)
        self.remember(started=sorted(self.started))
        await appender.written()  # a step recorded as started before it can start: never twice
        try:
            await self.session.send(RunStep(step=step, command=command, env=self.job.env))
        except NodeGone as exc:
            self.post(fsm.NodeLost(str(exc)))

    @property
    def step_exited(self) -> bool:
        return self._step_exited.is_set()

    @property
    def on_warm_node(self) -> bool:
        """The run took a node an earlier run left warm (engine/run/warm.py)."""
        return self.birth_run != self.view.run_id

    @property
    def step_over(self) -> bool:
        """No step is running on the node (none was started, or it exited)."""
        return self._running_step is None or self._step_exited.is_set()

    def expect_exit(self, step: Step) -> None:
        """`step` is running on the node: its exit will arrive as an event. Its log opens
        first: a step whose log cannot open is never sent, and a teardown that waited for
        its exit would wait out the whole stop grace for nothing."""
        self.logs.open(step)
        self._running_step = step
        self._step_exited.clear()

    async def teardown(self) -> None:
        await self._cancel_work(keep=asyncio.current_task())
        if self.handle is not None and await warm.park(self, self._provider):
            self._node_event(ev.NodeState.WARM)  # its idle time is the warm node's bill
        elif self.handle is not None:
            try:
                self._node_event(ev.NodeState.TEARING_DOWN)
                await appender.written()  # on record before the node is asked to go
                await self._release_node()
            finally:  # whatever broke above, the node is destroyed
                problem = await destroy(self._provider, self.handle)
            if problem is not None:
                message = self.redact(problem)
                self.publish(ev.Alert(run_id=self.view.run_id, message=message, persistent=True))
                self._node_event(ev.NodeState.UNCONFIRMED)  # never "gone": it may still bill
            else:
                self._cost.destroyed(time.time())  # a closed node bills up to its destroy
                self._node_event(ev.NodeState.GONE)
            await asyncio.to_thread(warm.let_go, self.handle)
        self.post(fsm.NodeTornDown())

    async def drop_node(self) -> str | None:
        """Destroy the node before the run's end: it failed its pre-flight (preflight.py).
        Its watch and session end first (its silence is no loss); the next node joins with
        a fresh token (the failed host saw this one). None once the destroy is confirmed,
        else why it is not."""
        assert self.handle is not None
        if self._watch is not None:
            self._watch.cancel()
        self._node_event(ev.NodeState.TEARING_DOWN)
        token = secrets.token_urlsafe(24)
        await self.session.rearm(token)
        self._bootstrap = dataclasses.replace(self._bootstrap, token=token)
        self.remember(token=token, last_seq=0)  # the next node's journal starts anew
        problem = await destroy(self._provider, self.handle)
        if problem is None:
            self._cost.destroyed(time.time())  # until the next node joins (await_join)
            self._node_event(ev.NodeState.GONE)
            self.handle = None  # nothing left for the run's teardown
            # nor for an adopter: it would wait on the dead node, and the next one's join
            # would land under the wrong handle
            self.remember(handle=None, agent_ticket=None, endpoint_id=None)
        return problem

    async def _release_node(self) -> None:
        """Ask a connected agent to stop its step and exit before the provider destroys it
        (a lost node cannot answer: waiting on it would only delay the teardown)."""
        if self.lost or not self.session.joined.is_set() or self.session.closed:
            return
        # a courtesy before the provider destroys the node: no failure of it may stop that
        with contextlib.suppress(Exception):
            if self._running_step is not None and not self._step_exited.is_set():
                async with asyncio.timeout(2):
                    await self.session.send(StopStep(grace_s=self._grace))
                async with asyncio.timeout(self._grace + SHUTDOWN_TIMEOUT_S):
                    await self._step_exited.wait()
            async with asyncio.timeout(SHUTDOWN_TIMEOUT_S):
                await self.session.send(Shutdown())

    # ---- what the node tells us --------------------------------------------------------

    def on_agent_event(self, msg: AgentEvent) -> None:
        match msg:
            case LogBatch():
                lines = [self._redacted(line) for line in msg.lines]
                # the datastream first: the step log then never holds a line events.jsonl
                # lacks (one writer, in order), so a console that shows the log's tail of a
                # run whose owner is killed does not see the node replay that line again
                self.publish(
                    ev.Log(run_id=self.view.run_id, step=msg.step, lines=lines, node_seq=msg.seq)
                )
                self.logs.write(msg.step, lines)
                return
            case GpuMetrics():
                self._on_gpu(msg)
                return
            case SinkDone():
                self.sink.on_done(msg)
            case SinkProgress():
                self.sink.on_progress(msg)
                return
            case PreflightDone():
                self.preflight.on_done(msg)
            case StepExited():
                self._on_exit(msg)
            case NodeFault() if msg.reason.startswith(RESTARTED):  # agent/restart.py
                self._running_step = None  # it died with the container: no exit will come
                self._step_exited.set()
                self.post(fsm.NodeGoing(self.redact(msg.reason)))
            case NodeFault():
                self.post(fsm.NodeFault(f"node fault: {self.redact(msg.reason)}"))
        self.remember(last_seq=msg.seq)

    def _on_gpu(self, msg: GpuMetrics) -> None:
        event = ev.GpuMetrics(run_id=self.view.run_id, t=msg.t, gpus=msg.gpus, node_seq=msg.seq)
        self.publish(event)
        if message := self._gpu_idle.observe(event, self._running_step is Step.RUN):
            self.publish(ev.Alert(run_id=self.view.run_id, message=message))
        if self._gpu_stop.observe(event, self._running_step is Step.RUN):  # idle_gpu_stop_s
            self.post(fsm.NodeGoing(f"GPU idle for {duration(self._gpu_stop.stretch_s)}"))

    def _redacted(self, line: LogLine) -> LogLine:
        """The line with secrets masked; copied only when something was masked (floods)."""
        text = self.redact(line.text)
        return line if text == line.text else line.model_copy(update={"text": text})

    def _on_exit(self, msg: StepExited) -> None:
        self._running_step = None
        self._step_exited.set()
        if msg.step is Step.SETUP:
            self.post(fsm.SetupCompleted() if msg.code == 0 else fsm.SetupFailed(msg.code))
        else:
            self.post(fsm.JobExited(msg.code))

    def on_node_lost(self, reason: str) -> None:
        """The session stopped hearing from the node; the provider says whether it took
        the node back (nodeloss.explain) before the loss is posted."""
        self.lost = True
        self._spawn(self._post_loss(reason))

    async def _post_loss(self, reason: str) -> None:
        self.post(await nodeloss.explain(self._provider, self.handle, reason))

    # ---- bookkeeping -------------------------------------------------------------------

    def _node_event(self, state: ev.NodeState) -> None:
        assert self.handle is not None
        self.publish(
            ev.Node(
                run_id=self.view.run_id,
                provider=self.handle.provider,
                node_id=self.handle.node_id,
                state=state,
                facts=self.session.facts,
                price_per_hour=self.handle.price_per_hour,
                offer=self.handle.offer or None,
            )
        )

    def _finish(self) -> None:
        self._cost.publish_final()
        self.publish(
            ev.Finished(
                run_id=self.view.run_id,
                state=self._fsm.state.value if self._fsm.state else "FAILED",
                exit_code=self._fsm.exit_code,
                reason=self.view.reason,
                missing_outputs=self.outputs.get("missing", []),
                outputs_note=self.outputs.get("note"),
            )
        )
        extra = {
            "outputs": self.outputs.get("summary"),
            "workspace_refused": self.workspace_refused,
            "job_file": str(self.job.source),
            "gpu": gpu_summary(self.view.gpus),
        }
        if self.sink.summary:
            extra["sink"] = self.sink.summary
        if by_phase := self._cost.by_phase():
            extra["cost_by_phase"] = by_phase
        if self.pushed:
            extra["push"] = self.pushed
        if self.preflight.tried:
            extra["preflight"] = self.preflight.tried
        summary = run_summary(self.view, self.clock, extra)
        appender.later(partial(self._write_summary, summary, asyncio.get_running_loop()))

    def _write_summary(self, summary: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
        """On the writer thread, behind the run's last events (the disk may be slow; the
        engine waits for it before it calls the run over): a failure is the run's alert."""
        try:
            write_summary(self.view.run_dir, summary)
        except OSError as exc:
            message = f"run.json not written: {one_line(exc)}"
            loop.call_soon_threadsafe(
                self.publish, ev.Alert(run_id=self.view.run_id, message=message)
            )
