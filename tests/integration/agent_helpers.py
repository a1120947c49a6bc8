"""A minimal orchestrator and a real `swjob-agent` subprocess, for the agent's end-to-end tests.

The orchestrator here is deliberately small and independent of the engine: it plays
the wire contract (Hello → Welcome/Reject, heartbeats with `last_seq`, commands)
from agent/protocol.py, stores events by seq like the real one, and can misbehave
on request (drop the connection, forget events, fall silent).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from iroh import iroh_ffi

from agent import endpoint, procgroup
from agent.credentials import write_secrets
from agent.protocol import (
    CTL_ALPN,
    XFER_ALPN,
    AgentEvent,
    Channel,
    Heartbeat,
    Hello,
    LogBatch,
    Reject,
    StepStarted,
    Welcome,
)
from agent.reattach import new_key, public_of
from tests.support.waiting import Changes

WAIT_S = 30.0
REATTACH_KEY = new_key()  # every test agent's re-attach secret (the engine's half)


class FakeOrchestrator:
    """Accepts the agent's ctl and xfer connections and records what it is told."""

    def __init__(self, ep: Any, token: str, reject: str | None, heartbeat_s: float) -> None:
        self.ep = ep
        self.token = token
        self.reject = reject
        self.heartbeat_s = heartbeat_s
        self.hellos: list[Hello] = []
        self.events: list[AgentEvent] = []  # stored, contiguous by seq
        self.received: list[int] = []  # every seq that arrived, duplicates included
        self.xfer_conns: list[Any] = []
        self.silent = False
        self.conn: Any = None
        self.channel: Channel | None = None
        self._changes = Changes()
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def start(
        cls, token: str, *, reject: str | None = None, heartbeat_s: float = 0.2
    ) -> FakeOrchestrator:
        orch = cls(await endpoint.bind(accept=True), token, reject, heartbeat_s)
        orch._spawn(orch._accept_loop())
        return orch

    @property
    def id(self) -> str:
        return str(self.ep.id())

    @property
    def ticket(self) -> str:
        return endpoint.ticket_of(self.ep)

    @property
    def stored_seq(self) -> int:
        return self.events[-1].seq if self.events else 0

    def forget_after(self, seq: int) -> None:
        """Pretend events after `seq` were never stored (the agent must replay them)."""
        self.events = [e for e in self.events if e.seq <= seq]

    def drop(self) -> None:
        """Close the control connection from this side, as a crashed network would."""
        if self.conn is not None:
            self.conn.close(0, b"test drop")

    async def send(self, msg: Any) -> None:
        assert self.channel is not None
        await self.channel.send(msg)

    async def until(self, predicate: Callable[[], bool], timeout: float = WAIT_S) -> None:
        await self._changes.until(predicate, timeout)

    def lines(self) -> list[str]:
        return [ln.text for e in self.events if isinstance(e, LogBatch) for ln in e.lines]

    def of_type(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def pids(self) -> list[int]:
        """Pids the job printed as `pid N`, and the steps' leaders."""
        printed = [int(x.split()[1]) for x in self.lines() if x.startswith("pid ")]
        return printed + [e.pid for e in self.of_type(StepStarted)]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ep.close()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _notify(self) -> None:
        self._changes.changed()

    async def _accept_loop(self) -> None:
        while (incoming := await self.ep.accept_next()) is not None:
            try:
                accepting = await incoming.accept()
                alpn = await accepting.alpn()
                conn = await accepting.connect()
            except iroh_ffi.IrohError:
                # a dial the agent gave up mid-handshake (its timeout, on a loaded machine):
                # the next one must still be accepted, as the engine's server does
                continue
            if alpn == CTL_ALPN:
                self._spawn(self._serve_ctl(conn))
            elif alpn == XFER_ALPN:
                self.xfer_conns.append(conn)
                self._notify()

    async def _serve_ctl(self, conn: Any) -> None:
        bi = await conn.accept_bi()
        channel = Channel(bi.recv(), bi.send())
        hello = await channel.recv()
        assert isinstance(hello, Hello)
        self.hellos.append(hello)
        self._notify()
        if self.reject is not None or hello.token != self.token:
            await channel.send(Reject(reason=self.reject or "bad token"))
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.closed(), 5)
            return
        self.conn, self.channel = conn, channel
        await channel.send(Welcome(replay_after=self.stored_seq, heartbeat_s=self.heartbeat_s))
        beat = asyncio.create_task(self._heartbeats(channel))
        try:
            while (msg := await channel.recv()) is not None:
                self._store(msg)
        except Exception:
            pass  # the connection went away: the agent will redial
        finally:
            beat.cancel()
            self._notify()

    def _store(self, msg: Any) -> None:
        if isinstance(msg, Heartbeat):
            return
        self.received.append(msg.seq)
        if msg.seq == self.stored_seq + 1:
            self.events.append(msg)
        self._notify()

    async def _heartbeats(self, channel: Channel) -> None:
        with contextlib.suppress(Exception):
            while True:
                if not self.silent:
                    await channel.send(Heartbeat(last_seq=self.stored_seq))
                await asyncio.sleep(self.heartbeat_s)


def secrets_name() -> str:
    """A fresh name for an agent's secrets file (a restarted agent gets another)."""
    return f".secrets-{time.monotonic_ns()}"


class AgentProc:
    """The real agent as a subprocess (`python -m agent`), killed by pid at teardown."""

    def __init__(self, proc: asyncio.subprocess.Process, root: Path, stderr: Path) -> None:
        self.proc = proc
        self.root = root
        self.stderr_path = stderr

    @classmethod
    async def start(
        cls, orch: FakeOrchestrator, root: Path, *args: str, orchestrator_id: str | None = None
    ) -> AgentProc:
        stderr = root.parent / f"{root.name}.stderr"
        root.mkdir(parents=True, exist_ok=True)  # its provider's to make, as on a real node
        argv = [
            *("--run-id", "run-1", "--ticket", orch.ticket),
            *("--orchestrator-id", orchestrator_id or orch.id, "--root", str(root)),
            *("--grace", "1", "--heartbeat", "0.2", "--deadline", "10", *args),
            *("--reattach-id", public_of(REATTACH_KEY)),
            *("--secrets-file", str(write_secrets(root / secrets_name(), orch.token))),
        ]
        with stderr.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agent",
                *argv,
                env=dict(os.environ),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=err,
                stderr=err,
            )
        return cls(proc, root, stderr)

    async def exit_code(self, timeout: float = WAIT_S) -> int:
        return await asyncio.wait_for(self.proc.wait(), timeout)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def kill(self) -> None:
        """SIGTERM (so it hangs up cleanly and the test endpoint closes fast), then SIGKILL."""
        for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
            if self.proc.returncode is not None:
                return
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.wait(), wait_s)


def files_containing(root: Path, needle: str) -> list[Path]:
    data = needle.encode()
    return [p for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]


def kill_leftover_group(root: Path) -> None:
    """Teardown safety net: SIGKILL what is left of the step the agent recorded.

    This is what the local provider does for an agent that died by SIGKILL."""
    procgroup.kill_recorded_step_now(root / "state" / "step.pgid")
