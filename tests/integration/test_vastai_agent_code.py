"""A rented node runs the operator's own agent, however swjob was installed: with no
`agent_install`, `swjob run` on a Vast pool (the real SDK against the stand-in) boots a
node whose python3 has the agent's third-party closure but no swjob from anywhere; the
node fetches the agent's code from the operator, checks its SHA-256 and runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.providers.agent_source import agent_bundle
from tests.standin.server import StandIn
from tests.support.venvs import venv_without_swjob

pytestmark = pytest.mark.timeout(120)

POOLS = """
[pools.gpu]
provider = "vastai"
image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
boot_timeout_s = 90
[pools.gpu.resources]
gpu_count = 1
"""
JOB = """
[job]
name = "shipped"
run = "ls $HOME/swjob/agent-code/*/agent/main.py; python3 -P -c 'import agent' || echo no-swjob"
"""


def python_without_swjob(tmp_path: Path) -> Path:
    python = venv_without_swjob(tmp_path / "node-python") / "python3"
    probe = subprocess.run([python, "-P", "-c", "import agent"], cwd=tmp_path, check=False)
    assert probe.returncode != 0, "the node's python must have no swjob"
    return python


def test_a_node_without_swjob_fetches_and_runs_the_operators_agent(
    tmp_path: Path, api: StandIn
) -> None:
    api.cloud.image_has_uv = False  # uv would look in the bare venv alone and go to the index
    api.cloud.image_python = python_without_swjob(tmp_path)
    (tmp_path / "pools.toml").write_text(POOLS)
    (tmp_path / "job.toml").write_text(JOB)
    cli = subprocess.run(
        [sys.executable, "-m", "engine.cli.main", "run", "job.toml",
         "--pools", "pools.toml", "--pool", "gpu"],
        cwd=tmp_path, capture_output=True, text=True, timeout=110, check=False,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stdout + cli.stderr
    _, digest = agent_bundle()
    assert f"agent-code/{digest}/agent/main.py" in cli.stdout
    assert "no-swjob" in cli.stdout  # the job's python3 cannot import it: only the agent
    assert api.cloud.destroyed and not api.cloud.instances
    boot = json.loads(next(tmp_path.rglob("run.json")).read_text())["boot"]
    installed = next(s for s in boot["steps"] if s["phase"] == "agent_installed")
    assert installed["seconds"] is not None  # the install step is still on the timeline
