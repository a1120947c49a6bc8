"""Real `swjob` processes for the ownership tests: start, signal, kill -9, read their runs.

Each process writes its output to a file (a pipe nobody reads could fill and stall it),
and the `clis` fixture kills and reaps whatever a test leaves running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from engine.report.datastream import read_events
from engine.report.events import Event
from tests.support.waiting import eventually


class Cli:
    """One real `swjob` process (`python -m engine.cli.main ARGS`) started in `cwd`."""

    def __init__(self, *args: str, cwd: Path) -> None:
        self.out_path = cwd / f"swjob-{args[0]}-{time.monotonic_ns()}.out"
        with self.out_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "engine.cli.main", *args],
                cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.proc.pid, sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait()

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            out = self.output()
            raise AssertionError(f"swjob still running after {timeout:g} s:\n{out}") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def clis() -> Iterator[Callable[..., Cli]]:
    """Start real `swjob` processes; every one is killed and reaped at the end."""
    started: list[Cli] = []

    def start(*args: str, cwd: Path) -> Cli:
        started.append(Cli(*args, cwd=cwd))
        return started[-1]

    yield start
    for cli in started:
        cli.close()


def only_run_dir(runs_root: Path, job: str) -> Path:
    """The single run directory of `job` (waits until the run has written it)."""
    root = runs_root / job
    eventually(lambda: root.exists() and any(root.iterdir()), what=f"a run of {job}")
    (run_dir,) = root.iterdir()
    return run_dir


def events(run_dir: Path) -> list[Event]:
    return read_events(run_dir / "events.jsonl")


def finished(run_dir: Path) -> Event | None:
    return next((e for e in events(run_dir) if e.kind == "finished"), None)


def finished_at(run_dir: Path) -> datetime:
    event = finished(run_dir)
    assert event is not None
    return event.ts


def agent_pid(run_dir: Path) -> int:
    """The local agent's pid, from the run's first node event."""
    eventually(lambda: any(e.kind == "node" for e in events(run_dir)), what="a node event")
    node = next(e for e in events(run_dir) if e.kind == "node")
    return int(node.offer["pid"])


def run_json(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "run.json").read_text())


def waiting_job(project: Path, name: str, release: Path, lines: int = 3) -> Path:
    """A job that prints `lines` lines, then waits for `release` to exist, then writes its
    output: the test decides when it ends. Returns the job file."""
    project.mkdir(parents=True, exist_ok=True)
    run = (
        f"for i in $(seq 1 {lines}); do echo line $i; done; "
        f"while [ ! -e {release} ]; do sleep 0.1; done; echo done > out.txt"
    )
    job = project / "job.toml"
    job.write_text(
        f'[job]\nname = "{name}"\nrun = "{run}"\n'
        f'workspace = {{ workdir = "." }}\noutputs = ["out.txt"]\n'
    )
    return job


def swjob_once(*args: str, cwd: Path, answer: str = "") -> subprocess.CompletedProcess[str]:
    """Run a short `swjob` command to its end, typing `answer` at its prompt."""
    return subprocess.run(
        [sys.executable, "-m", "engine.cli.main", *args],
        cwd=cwd, input=answer, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
