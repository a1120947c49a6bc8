"""A state or cache directory swjob cannot use (a file in its way) is one line naming it.

The real `swjob run` (whose agents' fork server starts before the engine), `swjob runs`
and `swjob-tui`: exit 1 with `error: <path>: cannot keep swjob's files here: …`, no
traceback, and no agent left behind (the autouse leftover check)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import swjob

SWJOB_TUI = Path(sys.executable).parent / "swjob-tui"

BROKEN = "cannot keep swjob's files here: Not a directory"


@pytest.fixture
def in_the_way(tmp_path: Path) -> Path:
    """A directory path whose parent is a regular file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    return blocker / "swjob"


@pytest.mark.parametrize("kind", ["STATE", "CACHE"])
def test_swjob_run_names_the_directory_it_cannot_use(
    tmp_path: Path, in_the_way: Path, make_job, kind: str
) -> None:
    make_job(run="echo never")
    job = tmp_path / "project" / "job.toml"
    env = {f"SWJOB_{kind}_DIR": str(in_the_way)}
    done = swjob("run", str(job), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path, env=env)
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert said.strip().splitlines()[-1] == f"error: {in_the_way}: {BROKEN}"
    assert "Traceback" not in said


def test_swjob_runs_and_the_console_say_it_too(tmp_path: Path, in_the_way: Path) -> None:
    env = {"SWJOB_STATE_DIR": str(in_the_way)}
    listed = swjob("runs", cwd=tmp_path, env=env)
    assert (listed.returncode, listed.stderr.strip()) == (1, f"error: {in_the_way}: {BROKEN}")
    console = subprocess.run(
        [SWJOB_TUI], cwd=tmp_path, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        timeout=60, env={**os.environ, **env},
    )  # fmt: skip
    assert console.returncode == 1, console.stdout + console.stderr
    assert console.stderr.strip() == f"error: {in_the_way}: {BROKEN}"


def test_swjob_run_names_a_runs_dir_it_cannot_use(tmp_path: Path, in_the_way: Path, make_job):
    """`--runs-dir` under a file: one line naming the run's directory (it was a
    NotADirectoryError traceback), exit 1, and no lease or index row left for a run
    that never began."""
    make_job(run="echo never")
    job = tmp_path / "project" / "job.toml"
    done = swjob("run", str(job), "--runs-dir", str(in_the_way), cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in said, said
    (line,) = said.strip().splitlines()[-1:]
    assert line.startswith(f"error: {in_the_way}/t/") and line.endswith(
        ": cannot make the run's directory: Not a directory"
    ), line
    assert swjob("runs", cwd=tmp_path).stdout.strip() in ("", "no runs yet")
