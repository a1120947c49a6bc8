"""Real `swjob` processes, started the way a user starts them, cleaned up by pid.

A background `swjob` writes its output to a file, not a pipe: a pipe nobody reads can
fill and stall it, and a file can be read again after the process is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

__all__ = ["SWJOB", "Cli", "clis", "swjob", "swjob_run"]

SWJOB = (sys.executable, "-m", "engine.cli.main")


def swjob(
    *args: str, cwd: Path, answer: str = "", timeout: float = 60.0, umask: int = -1,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`swjob ARGS` in `cwd` to its end, `answer` typed at its prompt, `env` added to ours."""
    return subprocess.run(
        [*SWJOB, *args], cwd=cwd, input=answer, capture_output=True, text=True,
        timeout=timeout, umask=umask, env={**os.environ, **(env or {})},
    )  # fmt: skip


def swjob_run(
    tmp_path: Path, job: Path, *args: str, umask: int = 0o022, **env: str
) -> tuple[int, str]:
    """`swjob run job` as the user runs it (from a shell with `umask`), its runs under
    `tmp_path/runs`; its exit code and everything it printed."""
    runs = str(tmp_path / "runs")
    done = swjob("run", str(job), "--runs-dir", runs, *args, cwd=tmp_path, umask=umask, env=env)
    return done.returncode, done.stdout + done.stderr


class Cli:
    """One real `swjob ARGS` process started in `cwd`, its output going to a file."""

    def __init__(self, *args: str, cwd: Path) -> None:
        self.out_path = cwd / f"swjob-{args[0]}-{time.monotonic_ns()}.out"
        with self.out_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [*SWJOB, *args], cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def has_printed(self, text: str) -> bool:
        """Whether `text` is in the output yet; an error once the process ended without it
        (for `eventually`: no waiting out the deadline for what can no longer come)."""
        if text in self.output():
            return True
        assert self.proc.poll() is None, f"swjob ended without printing {text!r}:\n{self.output()}"
        return False

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
    """`clis(*args, cwd=...)` starts a real `swjob`; every one is killed and reaped at the end."""
    started: list[Cli] = []

    def start(*args: str, cwd: Path) -> Cli:
        started.append(Cli(*args, cwd=cwd))
        return started[-1]

    yield start
    for cli in started:
        cli.close()
