"""An adopted run keeps pace with its node's silence deadline, whatever the pools file says.

A node's agent takes its silence deadline from the pool as it was when the run started.
The adopter's pools file may say otherwise (no pools file at all: the local pool's 10 s),
and the adopter heartbeated at the pace of its own file: on a pool that gave a node up
after 0.5 s, the node took the adopter for dead between two heartbeats, redialed every
half second, and each redial cut the transfer collecting its outputs (the run FAILED
with its job's exit 0).

Here the node gives up after 1.5 s: the adopter's own pace (2.5 s) is still past it,
and a loaded machine stalling the adopter's loop for a whole deadline is not a worry.
The agent's log is read from the kill on: a loaded owner may have been slow before."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.state.paths import cache_dir
from tests.support.cli import Cli
from tests.support.processes import node_dirs
from tests.support.runs import only_run_dir
from tests.support.waiting import eventually

SHORT_POOL = '[pools.local]\nprovider = "local"\nnode_lost_after_s = 1.5\n'


def paced_job(project: Path, release: Path) -> Path:
    """Waits for `release`, then runs 4 s more (several of the node's deadlines, with the
    adopter driving), then keeps a copy of the agent's log among its outputs."""
    project.mkdir()
    run = (
        f"echo waiting; while [ ! -e {release} ]; do sleep 0.05; done; sleep 4; "
        "cp ../logs/agent.log agent.txt; echo done > out.txt"
    )
    job = project / "job.toml"
    job.write_text(f'[job]\nname = "paced"\nrun = "{run}"\noutputs = ["out.txt", "agent.txt"]\n')
    return job


def test_an_adopter_with_a_slower_pool_keeps_the_node_from_redialing(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    pools = tmp_path / "pools.toml"
    pools.write_text(SHORT_POOL)
    release = tmp_path / "release"
    job = paced_job(tmp_path / "job", release)
    runs = str(tmp_path / "runs")
    owner = clis("run", str(job), "--pools", str(pools), "--runs-dir", runs, cwd=tmp_path)
    run_dir = only_run_dir(tmp_path / "runs", "paced")
    eventually(lambda: owner.has_printed("run | waiting"), 60, "the job running")
    [node] = node_dirs()
    agent_log_now = cache_dir() / "nodes" / node / "logs" / "agent.log"
    killed_at = len(agent_log_now.read_text())
    owner.kill9()
    # the node sees its owner's death first (an adopter within its 1.5 s would not let it)
    eventually(
        lambda: "orchestrator silent" in agent_log_now.read_text()[killed_at:], 30, "silence seen"
    )
    adopter = clis("attach", run_dir.name, cwd=tmp_path)  # no pools file: the local 10 s
    eventually(lambda: adopter.has_printed("recovered after operator restart"), 60, "adopted")
    release.touch()
    assert adopter.wait(60) == 0, adopter.output()
    assert (run_dir / "outputs" / "out.txt").read_text() == "done\n"
    agent_log = (run_dir / "outputs" / "agent.txt").read_text()[killed_at:]
    silent_at = agent_log.find("orchestrator silent")  # the owner's death: its path ran
    assert silent_at >= 0, agent_log
    # the adopter proved the run (taken over) or the node redialed it first (joined)
    after = adopted_from(agent_log[silent_at:])
    assert "orchestrator silent" not in after, after


def adopted_from(log: str) -> str:
    """The agent's log after the adopter took the run on."""
    marks = [at for mark in ("run taken over", "joined;") if (at := log.find(mark)) >= 0]
    assert marks, log
    return log[min(marks) :]
