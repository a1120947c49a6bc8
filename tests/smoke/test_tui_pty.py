"""The real `swjob-tui` binary in a pseudo-terminal: what a person at a terminal sees."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.smoke.terminal import Terminal
from tests.standin.server import StandIn

pytestmark = pytest.mark.timeout(120)

BIN = Path(sys.executable).parent


def write_job(root: Path, name: str, run: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "job.toml").write_text(
        f'[job]\nname = "{name}"\nrun = """{run}"""\noutputs = ["out.txt"]\n'
    )
    return root / "job.toml"


def vast_pools(path: Path) -> Path:
    path.write_text(
        "[pools.gpu]\n"
        'provider = "vastai"\n'
        'image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"\n'
        "boot_timeout_s = 60\n"
        'agent_install = "swjob==0.1.0"\n'
        "[pools.gpu.resources]\ngpu_count = 1\n"
    )
    return path


def console(tmp_path: Path, *args: str, cols: int = 120, rows: int = 40) -> Terminal:
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(cols), "LINES": str(rows)}
    argv = [str(BIN / "swjob-tui"), "--runs-dir", str(tmp_path / "runs"), *args]
    return Terminal(argv, cwd=tmp_path, env=env, cols=cols, rows=rows)


def test_a_vast_pool_runs_a_job_to_completed_from_the_console(tmp_path: Path, api: StandIn) -> None:
    job = write_job(tmp_path / "job", "vastjob", "echo hello > out.txt")
    pools = vast_pools(tmp_path / "pools.toml")
    term = console(tmp_path, str(job), "--pool", "gpu", "--pools", str(pools))
    try:
        term.wait_for("COMPLETED", timeout=60)
        term.press("q")
        assert term.wait_exit() == 0
    finally:
        term.kill()
    assert (tmp_path / "runs" / "vastjob").is_dir()
