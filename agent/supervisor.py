"""Supervised execution of one step (`setup` or `run`) at a time.

The command runs as `/bin/sh -c COMMAND` in the workdir, in its own session (so its
process group can be signalled as a whole), with stdin from /dev/null and an
environment of the agent's own minus the node's secrets (agent/credentials.py) plus
the job's `env`. Its
stdout and stderr are always drained, split into lines, redacted with the job's env
values, written to `logs/<step>.log` and emitted as batched `LogBatch` events. The
events are what counts: a node whose disk is full (often filled by the job itself)
loses the file copy, never the events or the step's StepExited.

A step is over when its leader exits; whatever it left behind in its group is then
terminated too (TERM, a short grace, KILL), and so is any process that left the group
but carries the step's `STEP_ENV` marker (a `setsid` daemon), and — the agent being
the child subreaper (`subreaper`) — any orphan reparented to the agent (a `setsid env -i`
daemon), so no process of a step outlives it and no stray child keeps its pipes open.
Events carry `seq=0`: the journal numbers them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from agent import priority, procgroup, shell, steprecord, subreaper
from agent.credentials import scrubbed
from agent.lines import LineSplitter, LogBatcher, StepLog
from agent.protocol import AgentEvent, NodeFault, Step, StepExited, StepStarted, Stream
from agent.redact import Redactor
from agent.steprecord import STEP_ENV, StepRecord, new_marker
from agent.transfer import landproc

log = logging.getLogger("swjob.agent")

READ_CHUNK = 256 * 1024
LEFTOVER_GRACE_S = 2.0
PIPE_DRAIN_S = 1.0  # after the group is gone, how long pipes held by escapees may stay open

Emit = Callable[[AgentEvent], object]


@dataclass
class _Running:
    step: Step
    proc: asyncio.subprocess.Process
    pipes: list[tuple[BinaryIO, Stream]]
    marker: str  # STEP_ENV=<value>, as it appears in /proc/<pid>/environ
    started: float = 0.0  # the leader's start (procgroup.started_at): no older process is marked
    task: asyncio.Task[None] | None = None
    stopper: asyncio.Task[None] | None = None
    stopped: bool = False
    readers: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def pgid(self) -> int:
        return self.proc.pid


def _spared(run: _Running) -> set[int]:
    """What a step's sweep leaves alone: its leader (asyncio reaps it), operator shells and
    the agent's landing processes (agent/transfer/landproc.py)."""
    return {run.pgid, *shell.session_pids(), *landproc.pids()}


class Supervisor:
    """Runs steps one at a time and reports them through `emit`."""

    def __init__(
        self,
        workdir: Path,
        logs_dir: Path,
        emit: Emit,
        *,
        base_env: Mapping[str, str] | None = None,
        pgid_file: Path | None = None,
        node_secrets: Iterable[str] = (),
        nice: int = 0,
    ) -> None:
        self._workdir = workdir
        self._nice = nice  # a local node's steps give way as its agent does (agent/priority.py)
        self._logs_dir = logs_dir
        self._emit = emit
        self._base_env = scrubbed(os.environ if base_env is None else base_env)
        self._node_secrets = tuple(node_secrets)  # masked in every step's output too
        self._pgid_file = pgid_file
        self._current: _Running | None = None
        self._starting = False

    @property
    def busy(self) -> bool:
        return self._starting or self._current is not None

    def mask(self, *secrets: str) -> None:
        """Mask these too in the output of every step started from now on (the sink's keys:
        a job that prints its environment or a file it found shows them as ***)."""
        self._node_secrets += tuple(s for s in secrets if s)

    async def start(self, step: Step, command: str, env: Mapping[str, str]) -> bool:
        """Spawn `command` for `step`; False (and a NodeFault) if busy or it cannot be spawned."""
        if self.busy:
            self._emit(NodeFault(seq=0, reason=f"cannot start {step}: another step is running"))
            return False
        self._starting = True
        try:
            run = await self._spawn(step, command, env)
        except OSError as exc:
            self._emit(NodeFault(seq=0, reason=self._spawn_failure(step, exc)))
            return False
        finally:
            self._starting = False
        self._current = run
        self._write_record(run)
        self._emit(StepStarted(seq=0, step=step, pid=run.pgid))
        run.task = asyncio.create_task(
            self._supervise(run, Redactor([*env.values(), *self._node_secrets]))
        )
        return True

    async def stop(self, grace_s: float) -> None:
        """Stop the running step (TERM, `grace_s`, KILL); returns after its StepExited."""
        run = self._current
        if run is None or run.task is None:
            return
        if run.proc.returncode is None and run.stopper is None:
            run.stopped = True
            run.stopper = asyncio.create_task(procgroup.terminate_group(run.pgid, grace_s))
        await asyncio.shield(run.task)

    async def _spawn(self, step: Step, command: str, env: Mapping[str, str]) -> _Running:
        """Start the command with pipes we own.

        asyncio (3.11) only reports a process's exit once its pipes close, and a
        child left in the background keeps them open; so the pipes are made here and
        read on their own, and `proc.wait()` means "the leader exited".
        """
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        # The read ends belong to the drain tasks, which close them; no with-block fits.
        pipes = [
            (open(out_r, "rb", 0), Stream.STDOUT),  # noqa: SIM115
            (open(err_r, "rb", 0), Stream.STDERR),  # noqa: SIM115
        ]
        marker = new_marker()
        try:
            proc = await asyncio.create_subprocess_exec(
                *priority.shell_argv(command, self._nice),
                cwd=self._workdir,
                env={**self._base_env, **env, STEP_ENV: marker.partition("=")[2]},
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                start_new_session=True,
            )
        except BaseException:
            for pipe, _ in pipes:
                pipe.close()
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        return _Running(step, proc, pipes, marker, started=procgroup.started_at(proc.pid))

    def _spawn_failure(self, step: Step, exc: OSError) -> str:
        if not self._workdir.is_dir():
            return f"cannot start {step}: workdir {self._workdir} does not exist"
        return f"cannot start {step}: {exc.strerror or exc.__class__.__name__}"

    async def _supervise(self, run: _Running, redact: Redactor) -> None:
        """Follow the step to its end; its StepExited is emitted whatever goes wrong here."""
        step_log = StepLog(self._logs_dir / f"{run.step}.log")
        try:
            batcher = LogBatcher(run.step, self._emit, step_log)
            await self._follow(run, redact, batcher)
            batcher.flush()
        except Exception:  # an agent-side fault: the step still ends, with what is known
            log.exception("supervising %s failed", run.step)
        finally:
            try:
                self._reap(run, step_log)
            finally:
                self._current = None
                self._emit(_exited(run))

    def _reap(self, run: _Running, step_log: StepLog) -> None:
        """Leave nothing of the step behind. Every part is attempted and none may keep the
        StepExited from being sent: the job may have wrecked the files it could reach."""
        for part in (step_log.close, lambda: _kill_leftovers(run), self._clear_record):
            try:
                part()
            except Exception:
                log.exception("cleaning up after %s failed", run.step)

    async def _follow(self, run: _Running, redact: Redactor, batcher: LogBatcher) -> None:
        run.readers = [
            asyncio.create_task(_drain(pipe, stream, redact, batcher)) for pipe, stream in run.pipes
        ]
        try:
            await run.proc.wait()
            if run.stopper is not None:
                await run.stopper
            else:
                await procgroup.terminate_group(run.pgid, LEFTOVER_GRACE_S)
            await procgroup.terminate_marked(run.marker, LEFTOVER_GRACE_S, run.started)
            await subreaper.terminate_leftovers(LEFTOVER_GRACE_S, keep=_spared(run))
            _, pending = await asyncio.wait(run.readers, timeout=PIPE_DRAIN_S)
        finally:
            for reader in run.readers:
                reader.cancel()
        if pending:
            await asyncio.wait(pending)

    def _write_record(self, run: _Running) -> None:
        """The step's group, marker and start (agent/steprecord.py), for cleaning up after
        a dead agent. Best effort: a full disk must not keep a started step from being
        supervised."""
        if self._pgid_file is not None:
            record = StepRecord(run.pgid, run.marker, run.started)
            try:
                self._pgid_file.parent.mkdir(parents=True, exist_ok=True)
                steprecord.write(self._pgid_file, record)  # through no link the job planted
            except OSError as exc:
                log.warning("cannot write %s: %s", self._pgid_file, exc.strerror or exc)

    def _clear_record(self) -> None:
        """Best effort too: the job may have put anything at that name."""
        if self._pgid_file is not None:
            try:
                self._pgid_file.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("cannot remove %s: %s", self._pgid_file, exc.strerror or exc)


async def _drain(pipe: BinaryIO, stream: Stream, redact: Redactor, batcher: LogBatcher) -> None:
    """Read one pipe to its end in large pieces, feeding redacted lines to the batcher."""
    reader = asyncio.StreamReader(limit=READ_CHUNK)
    loop = asyncio.get_running_loop()
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
    except BaseException:
        pipe.close()
        raise
    splitter = LineSplitter(redact=redact)  # redacts before it cuts a long line
    try:
        while chunk := await reader.read(READ_CHUNK):
            for line in splitter.feed(chunk):
                batcher.add(stream, line)
    finally:
        transport.close()
        for line in splitter.finish():
            batcher.add(stream, line)


def _kill_leftovers(run: _Running) -> None:
    """KILL what is left of the step at once (only something when cancelled or broken)."""
    if procgroup.group_alive(run.pgid):
        procgroup.kill_group_now(run.pgid)
    procgroup.kill_marked_now(run.marker, run.started)
    subreaper.kill_leftovers_now(keep=_spared(run))


def _exited(run: _Running) -> StepExited:
    rc = run.proc.returncode
    if rc is None:  # supervision ended early and the group was just SIGKILLed
        rc = -signal.SIGKILL
    sig = -rc if rc < 0 else None
    code = 128 + sig if sig is not None else rc
    return StepExited(seq=0, step=run.step, code=code, signal=sig, stopped=run.stopped)
