"""Shared tools for the fault-injection tests: an engine with short deadlines, a tap on the
datastream to await the moment a fault must be injected, and process checks by pid."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.engine import Engine, EngineConfig
from engine.jobs.pools import BUILTIN_LOCAL, PoolSet
from engine.report import events as ev
from engine.report.views import RunView
from tests.support.processes import pid_alive

__all__ = [
    "Tap", "engine_with", "kill_quietly", "local_pools", "pid_alive", "pids_in_logs", "run_json",
    "swjob_run",
]  # fmt: skip

PID_LINE = re.compile(r"\bpid=(\d+)")


def local_pools(**settings: Any) -> PoolSet:
    """The built-in pools with the local pool's settings changed (short test deadlines)."""
    return PoolSet({"local": BUILTIN_LOCAL.model_copy(update=settings)})


@contextlib.asynccontextmanager
async def engine_with(
    runs_dir: Path,
    *,
    deadline_s: float = 10.0,
    heartbeat_s: float = 0.5,
    grace_s: float = 2.0,
    **local: Any,
) -> AsyncIterator[Engine]:
    """A started engine on the built-in local pool with `deadline_s` as its node_lost_after_s
    (and any other `local` pool settings), closed (every live run stopped) afterwards."""
    eng = Engine(
        EngineConfig(
            runs_dir=runs_dir,
            pools=local_pools(node_lost_after_s=deadline_s, **local),
            heartbeat_s=heartbeat_s,
            stop_grace_s=grace_s,
        )
    )
    await eng.start()
    try:
        yield eng
    finally:
        await eng.close(stop_running=True)


@dataclass
class Tap:
    """Every event the engine publishes from now on, kept in order with its arrival time.

    Subscribing before the submit means no event can slip past a waiter: `until` looks
    at what was already seen before it waits for more.
    """

    engine: Engine
    seen: list[tuple[float, ev.Event]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._sub = self.engine.subscribe(maxsize=1_000_000)
        self._cursor = 0

    async def until(
        self, match: Callable[[ev.Event], bool], timeout: float = 30.0
    ) -> tuple[float, ev.Event]:
        """The first event (from the start of the tap) that matches, with its arrival time."""
        for arrived, event in self.seen:
            if match(event):
                return arrived, event
        async with asyncio.timeout(timeout):
            async for event in self._sub:
                self.seen.append((time.monotonic(), event))
                if match(event):
                    return self.seen[-1]
        raise AssertionError("the datastream closed before the awaited event")

    def drain(self) -> None:
        """Take in what is queued without waiting (arrival times are then the drain's)."""
        now = time.monotonic()
        while (event := self._sub.get_nowait()) is not None:
            self.seen.append((now, event))

    def events(self, run_id: str) -> list[ev.Event]:
        return [e for _, e in self.seen if e.run_id == run_id]

    def close(self) -> None:
        self.drain()
        self._sub.close()


def pids_in_logs(event: ev.Event) -> list[int]:
    """Pids a job printed as `pid=N` (the tests' jobs announce their processes this way)."""
    if not isinstance(event, ev.Log):
        return []
    return [int(m) for line in event.lines for m in PID_LINE.findall(line.text)]


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> None:
    """Cleanup for a test's own stray process (by pid); it may well be gone already."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def run_json(view: RunView) -> dict:
    import json

    return json.loads((view.run_dir / "run.json").read_text())


def swjob_run(
    tmp_path: Path, job: Path, *args: str, umask: int = 0o022, **env: str
) -> tuple[int, str]:
    """`swjob run` as the user runs it (from a shell with `umask`); its exit code and
    everything it printed."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from engine.cli.main import main; sys.exit(main())",
         "run", str(job), "--runs-dir", str(tmp_path / "runs"), *args],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=60, umask=umask,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr
