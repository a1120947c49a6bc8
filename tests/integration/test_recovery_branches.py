"""The branches of recovery: the operator's process dies at a precise moment (it kills
itself with SIGKILL from inside the code path), and a new engine adopts the run.

- while the run was queued for a slot (no node asked for): the adopter starts it;
- after its node was asked for, before its handle was recorded (a node directory made,
  no agent in it): its node may exist, so the run is FAILED, never provisioned twice,
  and the empty directory is removed;
- half way through the workspace push (MATERIALIZING): the push is issued again;
- half way through the output pull (COLLECTING): the pull is issued again;
- the job file changed or is gone while the operator was away: the run is FAILED (a
  different job must not run under its name) and its node torn down.

Real engines, real agents on the local pool, real iroh on loopback.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.jobs.pools import load_pools
from engine.providers.local import SECRETS_FILE
from engine.report.datastream import read_events
from engine.run.recovery import QUEUED_RESTART
from engine.state.paths import cache_dir
from tests.integration.test_crash_recovery import crashed_run  # noqa: F401 (a fixture)
from tests.support.processes import pid_alive
from tests.support.recovery import ENGINE_MAIN, recover
from tests.support.runs import agent_pid, only_run_dir

pytestmark = pytest.mark.timeout(120)

DIE_AT = """
import os, signal


def die(where):
    print(where, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def dying(progress):
    # the first report of a transfer under way: some bytes moved, not all
    def report(p):
        progress(p)
        if 0 < p.bytes_done < p.bytes_total:
            die("DIED mid-transfer")
    return report
"""

PATCHES = {
    "queued": """
from engine.providers import local

async def provision(self, bootstrap):
    die("DIED while queued")  # before the pool had a slot: no node was asked for

local.LocalProvider.provision = provision
""",
    "provisioning": """
from engine.providers import local

from engine.report import appender

async def fork(root, args, env):
    await appender.written()  # its boot under way is on record: a node was asked for
    die("DIED while provisioning")  # its node's directory made, its agent not started

local._fork = fork
""",
    "push": """
from engine.run import runsupport
real_push = runsupport.push_workspace

async def push_workspace(link, root, exclude, progress, **options):
    return await real_push(link, root, exclude, dying(progress), **options)

runsupport.push_workspace = push_workspace
""",
    "pull": """
from engine.run import runsupport
real_pull = runsupport.pull_outputs

async def pull_outputs(link, outputs, run_dir, progress, **kwargs):
    return await real_pull(link, outputs, run_dir, dying(progress), **kwargs)

runsupport.pull_outputs = pull_outputs
""",
}

BIG = 20 * 1024 * 1024  # a large file, in several chunks: the engine dies before the last


def die_at(where: str, job: Path, runs: Path) -> str:
    """Drive `job` in an engine process that SIGKILLs itself at `where`; what it printed."""
    printed = runs.parent / f"died-{where}.txt"
    with printed.open("w") as out:  # not a pipe: the node it started may hold it open
        code = subprocess.run(
            [sys.executable, "-c", DIE_AT + PATCHES[where] + ENGINE_MAIN, str(job), str(runs)],
            stdout=out, stderr=subprocess.STDOUT, timeout=60,
        ).returncode  # fmt: skip
    assert code == -9, printed.read_text()
    return printed.read_text()


def phases(run_dir: Path) -> list[str]:
    return [e.to_phase for e in read_events(run_dir / "events.jsonl") if e.kind == "transition"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def alerts(run_dir: Path) -> list[str]:
    return [e.message for e in read_events(run_dir / "events.jsonl") if e.kind == "alert"]


def echo_killed_at(where: str, said: str, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A job printing `ran`, driven by an engine that SIGKILLs itself at `where` after
    printing `said`: its job file, the runs dir and the run's dir."""
    job = tmp_path / "job.toml"
    job.write_text('[job]\nname = "crashy"\nrun = "echo ran"\n')
    runs = tmp_path / "swjob-runs"
    assert said in die_at(where, job, runs)
    return job, runs, only_run_dir(runs, "crashy")


async def test_killed_while_queued_the_adopter_starts_the_run(tmp_path: Path) -> None:
    _, runs, run_dir = echo_killed_at("queued", "DIED while queued", tmp_path)
    assert phases(run_dir)[-1] == "provisioning"
    view = await recover(runs, load_pools(None), run_dir.name)
    assert view.state == "COMPLETED", view.reason
    assert (run_dir / "logs" / "run.log").read_text().splitlines() == ["ran"]  # once
    said = alerts(run_dir)
    assert said == [QUEUED_RESTART], said  # said once, and not as a recovery of a node
    causes = [e.cause for e in read_events(run_dir / "events.jsonl") if e.kind == "transition"]
    assert causes[:3] == ["JobSubmitted", "QueuedRunAdopted", "NodeReady"], causes
    assert json.loads((run_dir / "run.json").read_text())["state"] == "COMPLETED"
    assert list(cache_dir().glob("nodes/*")) == []


async def test_killed_while_queued_with_its_job_file_changed_the_run_is_failed(
    tmp_path: Path,
) -> None:
    job, runs, run_dir = echo_killed_at("queued", "DIED while queued", tmp_path)
    job.write_text('[job]\nname = "crashy"\nrun = "echo other"\n')
    view = await recover(runs, load_pools(None), run_dir.name)
    assert view.state == "FAILED"
    assert view.reason == (
        "could not resume after operator restart: job file changed while the operator was away"
    )
    assert QUEUED_RESTART not in alerts(run_dir)  # it was not started: not said to be
    assert not (run_dir / "logs" / "run.log").exists()
    assert list(cache_dir().glob("nodes/*")) == []


async def test_killed_after_its_node_was_asked_for_fails_the_run(tmp_path: Path) -> None:
    _, runs, run_dir = echo_killed_at("provisioning", "DIED while provisioning", tmp_path)
    assert phases(run_dir)[-1] == "provisioning"
    [made] = cache_dir().glob(f"nodes/local-{run_dir.name}-*")  # by the real provider
    assert [p.name for p in made.iterdir()] == [SECRETS_FILE]  # no agent.log: never started
    view = await recover(runs, load_pools(None), run_dir.name)
    assert view.state == "FAILED"
    assert view.reason == "operator restarted before the node was provisioned"
    assert json.loads((run_dir / "run.json").read_text())["state"] == "FAILED"
    assert not (run_dir / "logs" / "run.log").exists()  # nothing ran anywhere
    assert list(cache_dir().glob("nodes/*")) == []  # its empty directory was left for good


async def test_killed_mid_push_the_push_is_issued_again(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "data.bin").write_bytes(os.urandom(BIG))
    job = project / "job.toml"
    job.write_text(
        '[job]\nname = "crashy"\nrun = "sha256sum data.bin > sum.txt"\n'
        'workspace = { workdir = "." }\noutputs = ["sum.txt"]\n'
    )
    runs = tmp_path / "swjob-runs"
    assert "DIED mid-transfer" in die_at("push", job, runs)
    run_dir = only_run_dir(tmp_path / "swjob-runs", "crashy")
    assert phases(run_dir)[-1] == "materializing"
    agent = agent_pid(run_dir)
    assert pid_alive(agent), "the node outlives its operator"
    view = await recover(runs, load_pools(None), run_dir.name)
    assert view.state == "COMPLETED", view.reason
    landed = (run_dir / "outputs" / "sum.txt").read_text().split()[0]
    assert landed == sha256(project / "data.bin")  # the node ran on the whole workspace
    assert not pid_alive(agent)
    assert list((cache_dir() / "nodes").iterdir()) == []


async def test_killed_mid_pull_the_pull_is_issued_again(tmp_path: Path) -> None:
    job = tmp_path / "job.toml"
    job.write_text(
        '[job]\nname = "crashy"\n'
        f'run = "head -c {BIG} /dev/urandom > big.bin; sha256sum big.bin > sum.txt"\n'
        'outputs = ["big.bin", "sum.txt"]\n'
    )
    runs = tmp_path / "swjob-runs"
    assert "DIED mid-transfer" in die_at("pull", job, runs)
    run_dir = only_run_dir(tmp_path / "swjob-runs", "crashy")
    assert phases(run_dir)[-1] == "collecting"
    view = await recover(runs, load_pools(None), run_dir.name)
    assert view.state == "COMPLETED", view.reason
    outputs = run_dir / "outputs"
    assert sha256(outputs / "big.bin") == (outputs / "sum.txt").read_text().split()[0]
    assert (outputs / "big.bin").stat().st_size == BIG
    assert list((cache_dir() / "nodes").iterdir()) == []


@pytest.mark.parametrize("change", ["changed", "gone"])
async def test_a_job_file_changed_or_gone_fails_the_run_and_tears_the_node_down(
    tmp_path: Path,
    crashed_run: tuple[Path, int],  # noqa: F811 (the fixture imported above)
    change: str,
) -> None:
    run_dir, agent = crashed_run
    job = tmp_path / "job.toml"
    if change == "changed":
        job.write_text(job.read_text().replace("echo line", "echo other"))
    else:
        job.unlink()
    view = await recover(tmp_path / "swjob-runs", load_pools(None), run_dir.name)
    assert view.state == "FAILED"
    problem = "job file changed" if change == "changed" else "job file is gone or unreadable"
    assert view.reason == (
        f"could not resume after operator restart: {problem}"
        + (" while the operator was away" if change == "changed" else "")
    )
    assert not pid_alive(agent)
    assert list((cache_dir() / "nodes").iterdir()) == []
    assert "line other" not in (run_dir / "logs" / "run.log").read_text()
