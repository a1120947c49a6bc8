"""`swjob run` on the local pool starts its node's agent in standby, before its own imports.

The standby is a real agent process: the run must be driven by it (and say so), and it
must never outlive the operator that started it — unused, refused, or orphaned."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine.providers.localspawn import StandbyAgent
from tests.support.cli import swjob
from tests.support.leftovers import processes_under
from tests.support.processes import node_dirs, pid_alive, reap
from tests.support.runs import events

HELLO = Path(__file__).parents[2] / "examples" / "hello" / "job.toml"
STANDBY = "(from standby)"


def _created_detail(run_dir: Path) -> str:
    boot = [e for e in events(run_dir) if e.kind == "boot" and e.phase == "instance_created"]
    return boot[0].detail or ""


def test_swjob_run_drives_its_run_with_the_standby_agent(tmp_path: Path) -> None:
    done = swjob("run", str(HELLO), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _created_detail(next((tmp_path / "runs" / "hello").iterdir())).endswith(STANDBY)
    assert STANDBY in done.stdout
    assert node_dirs() == []  # its node's directory went with the node, as any node's


def test_a_run_that_never_starts_ends_its_standby(tmp_path: Path) -> None:
    """The pools file is missing: swjob says so, after its standby agent was started."""
    missing = tmp_path / "nope.toml"
    done = swjob("run", str(HELLO), "--pools", str(missing), cwd=tmp_path)
    assert done.returncode == 1 and "nope.toml" in done.stderr
    assert processes_under(tmp_path) == []  # ended before swjob exited, not some time after
    assert node_dirs() == []


async def test_an_unused_standby_is_ended_by_its_starter() -> None:
    standby = await StandbyAgent.start()
    assert [name.startswith("standby-") for name in node_dirs()] == [True]
    await standby.close()
    assert standby.process.returncode is not None and not pid_alive(standby.process.pid)
    assert node_dirs() == []


async def test_a_dead_standby_is_replaced_by_a_fresh_agent(make_engine, make_job) -> None:
    standby = await StandbyAgent.start()
    standby.process.kill()
    await standby.process.wait()
    engine = await make_engine(standby=standby)
    run_id = await engine.submit(make_job(run="true"), "local")
    view = await engine.wait(run_id)
    await standby.close()
    assert view.state == "COMPLETED"
    detail = _created_detail(Path(view.run_dir))
    assert detail.startswith("swjob-agent process ") and STANDBY not in detail
    assert node_dirs() == []


def _standby(directory: Path) -> subprocess.Popen[str]:
    directory.mkdir()
    (directory / "agent.log").touch()
    return subprocess.Popen(
        [sys.executable, "-m", "agent", "--standby", str(directory)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_standby_whose_operator_is_gone_exits_and_removes_its_dir(tmp_path: Path) -> None:
    """An operator that dies (kill -9 included) closes the standby's stdin: end of file."""
    agent = _standby(tmp_path / "standby-x")
    try:
        _, err = agent.communicate("", timeout=60)
        assert agent.returncode == 0, err
        assert not (tmp_path / "standby-x").exists()
    finally:
        reap(agent)


def test_a_bootstrap_sets_only_the_runs_secrets(tmp_path: Path) -> None:
    agent = _standby(tmp_path / "standby-y")
    line = json.dumps({"argv": ["--help"], "env": {"LD_PRELOAD": "/tmp/evil.so"}})
    try:
        _, err = agent.communicate(line + "\n", timeout=60)
        assert agent.returncode == 2 and "only the run's secrets" in err
    finally:
        reap(agent)
