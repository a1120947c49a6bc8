"""The operator's fork server: local nodes' agents forked, imports done, in milliseconds.

One `swjob-agent --fork-server` (agent/forkserver.py) per operator process, shared by
every engine and local pool in it: started ahead of need by `warm()` (`swjob run` does
it first thing, the console when its engine starts) or by the first local node. Each
node then costs a fork instead of an interpreter's start and ~0.35 s of imports.

The agents are the server's children, not ours: their exit codes come as its reports.
If the server dies (killed, or it could not start), its agents go on, watched by pid
(`ForkedAgent.wait` then knows only that they ended), and the next node starts a new
server. A server whose operator dies — kill -9 included — sees its stdin close and
exits; the agents it forked live on as orphans of their operator, as any agent would.

This module imports little on purpose: `swjob run` imports it before the engine. The
pipe is read by a thread, so one server serves engines on different event loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from pathlib import Path
from typing import IO, Any

from agent.forkserver import FLAG, REFUSED

log = logging.getLogger("swjob.local")

GONE_POLL_S = 0.2


class ForkServerGone(Exception):
    """The server is not running (it could not start, or it ended): start the agent
    another way."""


class ForkedAgent:
    """An agent process the server forked: its pid and, when it ends, its exit code."""

    def __init__(self, pid: int, exited: Future[int | None]) -> None:
        self.pid = pid
        self.exited = exited  # set by the server's reader thread

    async def wait(self) -> int | None:
        """Its exit code once it has ended; None if the server went first (the agent then
        ended unseen by us: watched by pid until it is gone)."""
        # shielded: a caller's timeout must not cancel the one future every waiter shares
        code = await asyncio.shield(asyncio.wrap_future(self.exited))
        if code is None:
            await until_gone(self.pid)
        return code


class ForkServer:
    def __init__(self, env: Mapping[str, str], umask: int) -> None:
        """Start the server process (its imports run while the caller goes on)."""
        self._process = subprocess.Popen(
            [sys.executable, "-m", "agent", FLAG], env=dict(env), cwd="/", umask=umask,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C at the console is the operator's to act on
        )  # fmt: skip
        self._lock = threading.Lock()
        self._answers: deque[Future[ForkedAgent]] = deque()  # one a request, in their order
        self._agents: dict[int, Future[int | None]] = {}  # forked, not ended yet
        self._gone = False
        assert self._process.stdout is not None
        reader = threading.Thread(
            target=self._read, args=(self._process.stdout,), name="fork server", daemon=True
        )
        reader.start()

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def running(self) -> bool:
        """Not ended: neither seen gone by the reader nor dead meanwhile (killed, it is
        dead before its reader wakes to the end of its pipe; `shared()` asked in between
        handed the dead server out, and `warm()` started nothing)."""
        return not self._gone and self._process.poll() is None

    @property
    def refused(self) -> bool:
        """It exited without forking anything: its imports started threads."""
        return self._gone and self._process.returncode == REFUSED

    async def fork(self, argv: Sequence[str], env: Mapping[str, str], root: Path) -> ForkedAgent:
        """An agent started with `argv` and exactly `env`, in `root` (which exists), its
        output to root/agent.log. Raises ForkServerGone when the server did not answer
        with its pid (an agent forked but never answered for is never given its go: it
        exits without starting)."""
        line = json.dumps({"argv": list(argv), "env": dict(env), "root": str(root)}).encode()
        answer: Future[ForkedAgent] = Future()
        with self._lock:
            if self._gone:
                raise ForkServerGone("fork server not running")
            self._answers.append(answer)
            try:
                assert self._process.stdin is not None
                self._process.stdin.write(line + b"\n")
                self._process.stdin.flush()
            except OSError:
                self._answers.remove(answer)
                raise ForkServerGone("fork server not running") from None
        try:
            return await asyncio.wrap_future(answer)
        except asyncio.CancelledError:  # given up: the agent, forked or to come, goes unused
            if not answer.cancel() and answer.exception() is None:
                _kill(answer.result().pid)  # forked already (else the reader ends it)
            raise

    def kill(self) -> None:
        """End it at once (SIGKILL: it may be stopped); its forked agents go on."""
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()

    def _read(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                if "exit" in message:
                    _settle(self._agents.pop(message["exit"], None), message["code"])
                    continue
                answer = self._answers.popleft()
                if "pid" in message:  # watched from now: its exit may be the next line
                    agent = ForkedAgent(message["pid"], Future())
                    self._agents[agent.pid] = agent.exited
            if "pid" not in message:
                _fail(answer, ForkServerGone(str(message.get("error"))))
            elif not _settle(answer, agent):  # its node gave up waiting for it
                _kill(agent.pid)
        self._ended()

    def _ended(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(5)  # its code first: `refused` reads it once it is gone
        with self._lock:
            self._gone = True
            answers, self._answers = list(self._answers), deque()
            agents, self._agents = list(self._agents.values()), {}
        for answer in answers:
            _fail(answer, ForkServerGone("fork server ended"))
        for exited in agents:
            _settle(exited, None)
        log.info("fork server ended (code %s)", self._process.returncode)


_server: ForkServer | None = None
_server_lock = threading.Lock()


def shared(env: Mapping[str, str], umask: int) -> ForkServer:
    """This process's fork server, started (with `env` and `umask`) if none is running.
    ForkServerGone where there is to be none: off Linux (forking a process that loaded
    native libraries without an exec is not safe everywhere; untested elsewhere), or
    once a server refused to fork (each node would pay its imports for nothing)."""
    global _server
    with _server_lock:
        if not sys.platform.startswith("linux"):
            raise ForkServerGone("fork server: Linux only")
        if _server is not None and _server.refused:
            raise ForkServerGone("fork server refused: threads started at its imports")
        if _server is None or not _server.running:
            _server = ForkServer(env, umask)
        return _server


def pid_running(pid: int) -> bool:
    """Whether `pid` is there and not a zombie (a container's PID 1 may never reap the
    orphans it inherits). Without /proc (macOS), whether it can be signalled."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        if Path("/proc/self").exists():
            return False  # /proc is there, the process is not
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat[stat.rfind(")") + 2] not in "ZX"


async def until_gone(pid: int) -> None:
    """Return once `pid` no longer runs: polled, for a process that is not our child
    (no exit of it reaches us)."""
    while pid_running(pid):
        await asyncio.sleep(GONE_POLL_S)


def _settle(future: Future[Any] | None, value: object) -> bool:
    """Give `future` its result; False if nobody waits for it any more (cancelled)."""
    if future is None:
        return True
    try:
        future.set_result(value)
    except InvalidStateError:
        return False
    return True


def _fail(future: Future[Any], exc: Exception) -> None:
    with contextlib.suppress(InvalidStateError):
        future.set_exception(exc)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
