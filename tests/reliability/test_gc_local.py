"""`swjob gc` on the built-in local pool: the runs of a `swjob run` killed with -9.

Its run stays unfinished in the index, so its slot of the pool's max_nodes stays taken
(engine/providers/slots.py) and the next `swjob run` waits, saying "`swjob gc` collects
its node". gc ignored local nodes: once the dead operator's agent had given up (the pool's
orphan_timeout_s; it removes its node directory) the slot stayed taken for good, and
while the agent ran, gc did not collect it either. Now gc ends such a run FAILED as it
does an abandoned Vast run — its node found gone, or its agent ended by gc — and the
waiting run gets the slot. Real `swjob` processes, real agents.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.run.abandon import GONE_REASON, REASON
from engine.state.paths import cache_dir
from tests.support.cli import Cli, swjob
from tests.support.processes import kill_quietly, node_dirs, pid_alive
from tests.support.runs import agent_pid, only_run_dir, run_json, waiting_job
from tests.support.waiting import eventually

POOLS = (
    '[pools.local]\nprovider = "local"\nmax_nodes = 1\n'
    "node_lost_after_s = 3\norphan_timeout_s = {orphan_s}\n"
)


def _abandoned(tmp_path: Path, clis: Callable[..., Cli], orphan_s: float) -> tuple[Path, Path, int]:
    """A `swjob run` on a one-node local pool killed with -9 while its job runs: the pools
    file, its run dir and its agent's pid."""
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS.format(orphan_s=orphan_s))
    job = waiting_job(tmp_path / "first", "first", tmp_path / "release-first")
    first = clis("run", str(job), "--pools", str(pools), "--runs-dir", str(tmp_path / "runs"),
                 cwd=tmp_path)  # fmt: skip
    run_dir = only_run_dir(tmp_path / "runs", "first")
    eventually(lambda: first.has_printed("run | line 3"), 60, "the job running")
    agent = agent_pid(run_dir)
    first.kill9()
    return pools, run_dir, agent


def _second_gets_the_slot_after_gc(
    tmp_path: Path, clis: Callable[..., Cli], pools: Path, run_dir: Path
) -> str:
    """A second `swjob run` waits for the dead run's slot; `swjob gc --yes` ends that run
    and the second runs to its end. Returns gc's output."""
    (tmp_path / "release-second").touch()
    job = waiting_job(tmp_path / "second", "second", tmp_path / "release-second")
    second = clis("run", str(job), "--pools", str(pools), "--runs-dir", str(tmp_path / "runs"),
                  cwd=tmp_path)  # fmt: skip
    said = f"by a run whose swjob process died ({run_dir.name})"
    eventually(lambda: second.has_printed(said), 60, "the second run waiting for the slot")
    assert "`swjob gc` collects its node" in second.output()
    collected = swjob("gc", "--pools", str(pools), "--yes", cwd=tmp_path, timeout=60)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert second.wait(60) == 0, second.output()
    assert run_json(only_run_dir(tmp_path / "runs", "second"))["state"] == "COMPLETED"
    return collected.stdout


def test_gc_ends_a_dead_operators_local_run_whose_node_gave_up(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    pools, run_dir, agent = _abandoned(tmp_path, clis, orphan_s=0.5)
    eventually(lambda: not pid_alive(agent) and node_dirs() == [], 30, "the node giving up")
    out = _second_gets_the_slot_after_gc(tmp_path, clis, pools, run_dir)
    assert f"run {run_dir.name} (pool local): its node is gone" in out, out
    ended = run_json(run_dir)
    assert (ended["state"], ended["reason"]) == ("FAILED", GONE_REASON)
    listed = swjob("gc", "--pools", str(pools), cwd=tmp_path)
    assert listed.stdout == "no orphaned nodes\n", listed.stdout


def test_gc_collects_the_running_node_of_a_dead_operators_local_run(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    """Its agent still runs (a long orphan_timeout_s): gc ends it, as it destroys an
    abandoned run's Vast instance, after listing it with the hint to carry it on."""
    pools, run_dir, agent = _abandoned(tmp_path, clis, orphan_s=600)
    listed = swjob("gc", "--pools", str(pools), cwd=tmp_path, answer="n\n")
    assert f"`swjob attach {run_dir.name}` carries it on" in listed.stdout, listed.stdout
    assert "nothing destroyed" in listed.stdout and pid_alive(agent)
    out = _second_gets_the_slot_after_gc(tmp_path, clis, pools, run_dir)
    assert "collected 1 of 1" in out, out
    assert not pid_alive(agent)
    ended = run_json(run_dir)
    assert (ended["state"], ended["reason"]) == ("FAILED", REASON)
    assert node_dirs() == []


def test_gc_leaves_a_node_directory_without_an_agent_to_swjob_attach(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    """The agent killed too (-9: it removed nothing): its directory proves no node gone —
    where processes cannot be listed its agent would not be found either, and its job may
    run on. gc lists it, leaves it, and `swjob attach` settles the run as it says."""
    pools, run_dir, agent = _abandoned(tmp_path, clis, orphan_s=600)
    kill_quietly(agent)
    eventually(lambda: not pid_alive(agent), 10, "the agent gone")
    [node] = node_dirs()
    listed = swjob("gc", "--pools", str(pools), "--yes", cwd=tmp_path)
    said = f"run {run_dir.name} (pool local): its node directory {cache_dir() / 'nodes' / node}"
    assert said in listed.stdout and "nothing to destroy" in listed.stdout, listed.stdout
    assert run_json_state(run_dir) is None
    attach = swjob("attach", run_dir.name, "--pools", str(pools), cwd=tmp_path)
    assert run_json_state(run_dir) == "FAILED", attach.stdout + attach.stderr
    assert node_dirs() == []


def run_json_state(run_dir: Path) -> str | None:
    """The run's final state, None while it has not ended (no run.json yet)."""
    return run_json(run_dir)["state"] if (run_dir / "run.json").exists() else None
