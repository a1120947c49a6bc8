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

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.run.abandon import GONE_REASON, REASON
from engine.state.paths import cache_dir, state_dir
from tests.support.cli import SWJOB, Cli, swjob
from tests.support.processes import kill_quietly, node_dirs, pid_alive, reap
from tests.support.runs import agent_pid, only_run_dir, run_json, waiting_job
from tests.support.waiting import eventually

POOLS = (
    '[pools.local]\nprovider = "local"\nmax_nodes = 1\n'
    "node_lost_after_s = 3\norphan_timeout_s = {orphan_s}\n"
)

GIVES_UP_S = 3
"""An orphan_timeout_s the node gives up in soon after the kill; its first join must fit
in it too, and a forked agent's join took over 0.5 s on a machine running two suites."""


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
    pools, run_dir, agent = _abandoned(tmp_path, clis, orphan_s=GIVES_UP_S)
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
    eventually(lambda: not pid_alive(agent), 30, "the agent gone")
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


def test_gc_ends_no_process_that_got_the_pid_of_an_agent_gone_while_it_asked(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    """gc lists the dead operator's agent, then waits for its question's answer. The agent
    gives up meanwhile (its directory removed) and its pid goes to another process of the
    user's: answered yes, gc ended that process as the agent. It looks again once it holds
    the run's lease: the node is gone, the run ended so, the other process left alone."""
    pools, run_dir, agent = _abandoned(tmp_path, clis, orphan_s=600)
    answer = tmp_path / "gc.out"
    with answer.open("wb") as out:
        gc = subprocess.Popen(
            [*SWJOB, "gc", "--pools", str(pools)],
            cwd=tmp_path, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    sleeper: subprocess.Popen[str] | None = None
    try:
        eventually(lambda: "orphan(s)? [y/N]" in answer.read_text(), 60, "gc's question")
        assert f"agent pid {agent})" in answer.read_text()
        [node] = node_dirs()
        (tmp_path / "release-first").touch()  # as the agent giving up: its job ends,
        written = cache_dir() / "nodes" / node / "work" / "out.txt"
        eventually(written.exists, 30, "the job's end")
        kill_quietly(agent)  # then the agent, and its directory is removed
        gone = Path(f"/proc/{agent}")  # reaped too: its pid free for another process
        eventually(lambda: not gone.exists(), 30, "the agent gone")
        shutil.rmtree(cache_dir() / "nodes" / node)
        sleeper = _started_with_pid(agent, ["sleep", "300"])
        assert gc.stdin is not None
        gc.stdin.write("y\n")
        gc.stdin.close()
        assert gc.wait(60) == 0, answer.read_text()
        assert sleeper.poll() is None, "gc ended the process that got the agent's pid"
        ended = run_json(run_dir)
        assert (ended["state"], ended["reason"]) == ("FAILED", GONE_REASON), answer.read_text()
    finally:
        reap(gc)
        if sleeper is not None:
            reap(sleeper)


def _started_with_pid(pid: int, args: list[str]) -> subprocess.Popen[str]:
    """`args` started as process `pid` (the kernel hands out the pid after the last one
    handed out, which root may set: /proc/sys/kernel/ns_last_pid); skipped where it cannot."""
    last = Path("/proc/sys/kernel/ns_last_pid")
    for _ in range(50):  # another process started meanwhile may take it first
        try:
            last.write_text(str(pid - 1))
        except OSError as exc:
            pytest.skip(f"cannot choose a process's pid here: {exc.strerror}")
        process = subprocess.Popen(args, text=True)
        if process.pid == pid:
            return process
        reap(process)
    pytest.skip(f"pid {pid} went to other processes 50 times")


def test_gc_ends_a_dead_operators_local_run_when_a_vast_account_cannot_be_listed(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    """The pools file names a Vast.ai pool too, its API key not set here (the example
    pools file's, copied by a user who runs locally): gc said so and ended there, and the
    local run's slot stayed taken for good. It says so and collects this machine's run."""
    pools, run_dir, agent = _abandoned(tmp_path, clis, orphan_s=GIVES_UP_S)
    eventually(lambda: not pid_alive(agent) and node_dirs() == [], 30, "the node giving up")
    with pools.open("a") as more:
        more.write('\n[pools.gpu]\nprovider = "vastai"\nimage = "x"\napi_key_env = "SWJOB_UNSET"\n')
    collected = swjob("gc", "--pools", str(pools), "--yes", cwd=tmp_path, env={"SWJOB_UNSET": ""})
    out = collected.stdout + collected.stderr
    assert "SWJOB_UNSET is not set" in out and collected.returncode == 1, out
    assert f"run {run_dir.name} (pool local): its node is gone" in out, out
    ended = run_json(run_dir)
    assert (ended["state"], ended["reason"]) == ("FAILED", GONE_REASON)


def _live_run(tmp_path: Path, clis: Callable[..., Cli]) -> tuple[Path, Cli, Path]:
    """A `swjob run` of a job waiting for `release-live`, its job running: (pools file,
    the process, its run dir)."""
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS.format(orphan_s=600))
    job = waiting_job(tmp_path / "live", "live", tmp_path / "release-live")
    live = clis("run", str(job), "--pools", str(pools), "--runs-dir", str(tmp_path / "runs"),
                cwd=tmp_path)  # fmt: skip
    run_dir = only_run_dir(tmp_path / "runs", "live")
    eventually(lambda: live.has_printed("run | line 3"), 60, "the job running")
    return pools, live, run_dir


def test_gc_takes_no_live_run_for_abandoned_when_its_lease_cannot_be_read(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    """The state dir's leases folder made a link to where it was (by a program of the
    user's) while a `swjob run` drives its run: its lease cannot be looked at (a link is
    refused), which gc read as no owner, and it listed the live run's node as abandoned,
    for `swjob attach` to carry on. A lease that cannot be read may be held: owned."""
    pools, live, run_dir = _live_run(tmp_path, clis)
    leases = state_dir() / "leases"
    leases.rename(leases.with_name("leases-moved"))
    leases.symlink_to("leases-moved")
    try:
        listed = swjob("gc", "--pools", str(pools), cwd=tmp_path, answer="n\n")
    finally:
        leases.unlink()
        leases.with_name("leases-moved").rename(leases)
        (tmp_path / "release-live").touch()
    assert live.wait(60) == 0, live.output()  # ended first: its node is gone either way
    assert run_json(run_dir)["state"] == "COMPLETED"
    assert "abandoned" not in listed.stdout, listed.stdout


def test_a_deleted_lease_file_does_not_make_a_live_run_abandoned(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    """`rm -rf` of the state dir's leases (a careless user, a local-pool job running as the
    operator) while a `swjob run` drives its run: its lock is held on a file no one can
    open, a fresh lock file was free, and gc took the live run for abandoned and
    destroyed its node. The owner's stamp in the run index (its pid and start) says it
    lives: gc neither lists nor collects it, and the run completes."""
    pools, live, run_dir = _live_run(tmp_path, clis)
    shutil.rmtree(state_dir() / "leases")
    try:
        collected = swjob("gc", "--pools", str(pools), "--yes", cwd=tmp_path, timeout=60)
    finally:
        (tmp_path / "release-live").touch()
    assert live.wait(60) == 0, live.output()
    assert run_json(run_dir)["state"] == "COMPLETED"
    assert "abandoned" not in collected.stdout and "collected" not in collected.stdout, (
        collected.stdout
    )


def test_gc_collects_with_the_pools_its_runs_keep_when_the_pools_file_is_broken(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    """A pools file broken since the run started stopped gc at its first line, and the node
    it is there to collect billed on until its orphan timeout: gc now warns and goes on
    with the pool definitions the unfinished runs keep."""
    pools, run_dir, agent = _abandoned(tmp_path, clis, orphan_s=600)
    pools.write_text("[pools.local\n")
    collected = swjob("gc", "--pools", str(pools), "--yes", cwd=tmp_path, timeout=60)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "TOML syntax" in collected.stderr and "gc goes on with the pools its runs keep" in (
        collected.stderr
    )
    assert "collected 1 of 1" in collected.stdout, collected.stdout
    assert not pid_alive(agent)
    ended = run_json(run_dir)
    assert (ended["state"], ended["reason"]) == ("FAILED", REASON)
    assert node_dirs() == []
