"""The operator's process dies mid-run (kill -9), or closes without stopping its
runs; a new one carries the run to its end — or tears the node down when it cannot."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.engine import Engine, EngineConfig
from engine.jobs.jobspec import load_job
from engine.jobs.pools import load_pools
from engine.providers.local import LocalProvider
from engine.report.datastream import read_events
from engine.state import ownership
from engine.state.ledger import Ledger
from engine.state.paths import cache_dir
from tests.standin.server import StandIn
from tests.support.cli import Cli, swjob
from tests.support.processes import kill_quietly, pid_alive, reap
from tests.support.recovery import ENGINE_MAIN, recover
from tests.support.runs import agent_pid, only_run_dir, waiting_job
from tests.support.vast import killed_while_creating
from tests.support.waiting import eventually, eventually_async

Start = Callable[..., Cli]
LINES = 40


def crashy_job(release: Path) -> str:
    """Half its lines, then a wait until `release` exists (the test kills the operator in
    between, however slow the machine), then the other half and its output."""
    half = LINES // 2
    run = (
        f"for i in $(seq 1 {half}); do echo line $i; done; "
        f"while [ ! -e {release} ]; do sleep 0.05; done; "
        f"for i in $(seq {half + 1} {LINES}); do echo line $i; done; echo out > out.txt"
    )
    workspace = '{ workdir = "." }'
    return (
        f'[job]\nname = "crashy"\nrun = "{run}"\nworkspace = {workspace}\noutputs = ["out.txt"]\n'
    )


def logged_lines(run_dir: Path) -> int:
    path = run_dir / "logs" / "run.log"
    return path.read_text().count("line ") if path.exists() else 0


@pytest.fixture
def crashed_run(tmp_path: Path, clis: Start) -> tuple[Path, int]:
    """`swjob run` killed with SIGKILL while the job is half way (it then goes on, with
    nobody watching); returns (run dir, agent pid)."""
    release = tmp_path / "release"
    (tmp_path / "job.toml").write_text(crashy_job(release))
    cli = clis("run", "job.toml", cwd=tmp_path)
    run_dir = only_run_dir(tmp_path / "swjob-runs", "crashy")
    eventually(lambda: logged_lines(run_dir) == LINES // 2, what="the first half logged")
    cli.kill9()
    release.touch()
    return run_dir, agent_pid(run_dir)


def drop_last_log_event(run_dir: Path) -> None:
    """As if the owner died between writing a batch to logs/run.log and its Log event to
    events.jsonl: the log holds lines the datastream does not, and the node replays them."""
    path = run_dir / "events.jsonl"
    lines = path.read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if '"kind":"log"' in line.replace(" ", ""))
    path.write_text("\n".join(lines[:last] + lines[last + 1 :]) + "\n")


@pytest.mark.parametrize("torn", [False, True], ids=["clean", "killed-between-log-and-event"])
async def test_attach_after_kill_9_finishes_the_run_with_the_full_log(
    tmp_path: Path, crashed_run: tuple[Path, int], torn: bool, clis: Start
) -> None:
    run_dir, agent_pid = crashed_run
    assert pid_alive(agent_pid), "the node keeps running while the operator is away"
    if torn:
        drop_last_log_event(run_dir)
    attach = clis("attach", run_dir.name, cwd=tmp_path)
    assert await asyncio.to_thread(attach.wait, 60) == 0, attach.output()
    log = (run_dir / "logs" / "run.log").read_text().splitlines()
    assert log == [f"line {i}" for i in range(1, LINES + 1)]  # complete, each line once
    assert (run_dir / "outputs" / "out.txt").read_text() == "out\n"
    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["state"] == "COMPLETED" and summary["exit_code"] == 0
    assert not pid_alive(agent_pid)
    assert list((cache_dir() / "nodes").iterdir()) == []
    assert "recovered after operator restart" in attach.output()


async def test_a_restarted_engine_shows_the_recovered_run_live(
    tmp_path: Path, crashed_run: tuple[Path, int]
) -> None:
    run_dir, _ = crashed_run
    engine = Engine(
        EngineConfig(runs_dir=tmp_path / "swjob-runs", pools=load_pools(None), adopt_orphans=True)
    )
    await engine.start()
    try:
        assert [v.run_id for v in engine.running()] == [run_dir.name]
        view = await asyncio.wait_for(engine.wait(run_dir.name), 60)
        assert view.state == "COMPLETED"
    finally:
        await engine.close()


async def test_a_node_that_died_with_the_operator_is_torn_down_and_the_run_failed(
    tmp_path: Path, crashed_run: tuple[Path, int]
) -> None:
    run_dir, agent_pid = crashed_run
    os.kill(agent_pid, signal.SIGKILL)
    view = await recover(tmp_path / "swjob-runs", load_pools(None), run_dir.name)
    assert view.state == "FAILED" and view.reason.startswith("node lost: agent process exited")
    assert list((cache_dir() / "nodes").iterdir()) == []


async def test_forward_to_a_run_whose_operator_was_killed_says_so(
    tmp_path: Path, crashed_run: tuple[Path, int]
) -> None:
    """The killed operator's live-access announcement stays behind. `swjob shell` said
    nobody drives the run; `swjob forward` said "forwarding …" and closed every
    connection it took, without a word. It now says so too (exit 1)."""
    run_dir, _ = crashed_run
    refused = swjob("forward", run_dir.name, "6006", cwd=tmp_path, timeout=20)
    said = refused.stdout + refused.stderr
    assert refused.returncode == 1 and "forwarding" not in said, said
    assert f"no swjob process drives run {run_dir.name}" in said, said
    view = await recover(tmp_path / "swjob-runs", load_pools(None), run_dir.name)
    assert view.state == "COMPLETED", view.reason


async def test_instance_created_but_never_joined_is_destroyed_after_a_crash(
    tmp_path: Path, api: StandIn, clis: Start
) -> None:
    """Kill the engine between 'instance created' and 'node joined'; the next engine finds
    the instance (from the store or the ledger) and destroys it."""
    api.cloud.faults.never_start = True
    pools_file = tmp_path / "pools.toml"
    pools_file.write_text(
        '[pools.gpu]\nprovider = "vastai"\nimage = "img"\nboot_timeout_s = 3\n'
        'agent_install = "swjob"\n'
        "[pools.gpu.resources]\ngpu_count = 1\n"
    )
    (tmp_path / "job.toml").write_text('[job]\nname = "crashy"\nrun = "true"\n')
    cli = clis("run", "job.toml", "--pool", "gpu", "--pools", str(pools_file), cwd=tmp_path)
    eventually(lambda: len(api.cloud.instances) == 1, what="an instance created")
    cli.kill9()
    assert len(api.cloud.instances) == 1, "the crash left a billing instance behind"
    view = await recover(
        tmp_path / "swjob-runs",
        load_pools(pools_file),
        only_run_dir(tmp_path / "swjob-runs", "crashy").name,
    )
    assert view.state == "FAILED"
    assert api.cloud.instances == {} and len(api.cloud.destroyed) == 1
    assert Ledger().open_entries() == []


async def test_a_create_still_in_flight_when_the_operator_died_is_found_and_torn_down(
    tmp_path: Path, api: StandIn, clis: Start
) -> None:
    """Kill the engine while its create call is in flight: Vast answers it after the
    engine is gone. The adopter comes before the instance exists; it must wait for the
    create to settle rather than call the run unprovisioned and leave the instance
    billing with nobody driving it."""
    api.cloud.faults.create_delay_s = 2.0
    pools_file = tmp_path / "pools.toml"
    pools_file.write_text(
        '[pools.gpu]\nprovider = "vastai"\nimage = "img"\nboot_timeout_s = 30\n'
        'agent_install = "swjob"\n'
        "[pools.gpu.resources]\ngpu_count = 1\n"
    )
    killed_while_creating(api, clis, tmp_path, pools_file)
    assert api.cloud.instances == {}, "the create answered before the kill"
    view = await recover(
        tmp_path / "swjob-runs",
        load_pools(pools_file),
        only_run_dir(tmp_path / "swjob-runs", "crashy").name,
    )
    await asyncio.sleep(max(0.0, api.cloud.faults.create_delay_s + 0.5))
    assert api.cloud.instances == {}, "the instance created after the crash was left billing"
    assert len(api.cloud.destroyed) == 1 and Ledger().open_entries() == []
    assert view.state == "COMPLETED", view.reason


def _engine_killed_at(patch: str, said: str, job: Path, runs: Path) -> str:
    """An engine process running `job`, with `patch` applied (it prints a line starting
    with `said` at the moment it stops), killed with -9 there; the line it printed."""
    first = subprocess.Popen(
        [sys.executable, "-c", patch + ENGINE_MAIN, str(job), str(runs)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert first.stdout is not None
        line = first.stdout.readline()
        assert line.startswith(said), line
        os.kill(first.pid, signal.SIGKILL)
    finally:
        reap(first)
    return line


FREEZE = """
import asyncio
from agent.protocol import RunStep, Step
from engine.run import control

real_send = control.NodeSession.send

async def send(self, msg):
    if isinstance(msg, RunStep) and msg.step is Step.RUN:
        print("FROZEN", flush=True)
        await asyncio.Event().wait()  # the operator dies here: the RunStep never leaves
    await real_send(self, msg)

control.NodeSession.send = send
"""


async def test_a_step_recorded_as_started_but_never_sent_is_started_after_recovery(
    tmp_path: Path,
) -> None:
    """The operator dies between recording 'run started' and sending RunStep: the node is
    idle and its journal holds no exit, so the next engine starts the step — once."""
    job = tmp_path / "job.toml"
    job.write_text(
        '[job]\nname = "crashy"\nsetup = "echo set up"\n'
        'run = "echo ran | tee out.txt"\noutputs = ["out.txt"]\n'
    )
    runs = tmp_path / "swjob-runs"
    _engine_killed_at(FREEZE, "FROZEN", job, runs)
    view = await recover(
        runs, load_pools(None), only_run_dir(tmp_path / "swjob-runs", "crashy").name
    )
    assert view.state == "COMPLETED", view.reason
    assert (view.run_dir / "outputs" / "out.txt").read_text() == "ran\n"
    assert (view.run_dir / "logs" / "run.log").read_text() == "ran\n"  # started exactly once
    assert list((cache_dir() / "nodes").iterdir()) == []


UNRECORDED = """
import asyncio
from engine.providers import forkserver

real_fork = forkserver.ForkServer.fork

async def fork(self, argv, env, root):
    agent = await real_fork(self, argv, env, root)
    print("FORKED", agent.pid, flush=True)
    await asyncio.Event().wait()  # the operator dies here: the agent's pid never recorded
    return agent

forkserver.ForkServer.fork = fork
"""


async def test_a_node_forked_but_never_recorded_is_found_after_a_crash(tmp_path: Path) -> None:
    """The operator dies after the fork server answered with the agent's pid (so the
    agent had its go) but before the pid was written down: the next engine finds the
    node by its directory and carries the run on — no agent left that nobody owns."""
    job = tmp_path / "job.toml"
    job.write_text('[job]\nname = "crashy"\nrun = "echo ran > out.txt"\noutputs = ["out.txt"]\n')
    runs = tmp_path / "swjob-runs"
    agent = int(_engine_killed_at(UNRECORDED, "FORKED", job, runs).split()[1])
    try:
        view = await recover(runs, load_pools(None), only_run_dir(runs, "crashy").name)
        assert view.state == "COMPLETED", view.reason
        assert (view.run_dir / "outputs" / "out.txt").read_text() == "ran\n"
        assert not pid_alive(agent), "the unrecorded node was left running"
        assert list((cache_dir() / "nodes").iterdir()) == []
    finally:
        kill_quietly(agent)


async def test_a_process_merely_working_in_a_node_dir_is_not_adopted_as_its_agent(
    tmp_path: Path,
) -> None:
    """A user's shell `cd`'d into a crashed run's node directory is not its agent: adopting
    it would end it at teardown. Only a process running the agent is found there."""
    run_id = "20260101-000000-0badc0de"
    root = cache_dir() / "nodes" / f"local-{run_id}-abcd"
    root.mkdir(parents=True)
    looker = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)], cwd=root
    )
    try:
        assert await LocalProvider(1).find_node(run_id) is None
        assert pid_alive(looker.pid)
    finally:
        kill_quietly(looker.pid)
        reap(looker)
        shutil.rmtree(root, ignore_errors=True)  # empty: find_node may have removed it


async def test_close_without_stopping_leaves_the_run_to_the_next_engine(tmp_path: Path) -> None:
    """`close(stop_running=False)`: the node keeps the job and the run's lease is free,
    so a later engine adopts the run and finishes it (each line once, outputs landed)."""
    release = tmp_path / "release"
    job = load_job(waiting_job(tmp_path / "project", "crashy", release))
    runs, pools = tmp_path / "swjob-runs", load_pools(None)
    first = Engine(EngineConfig(runs_dir=runs, pools=pools))
    await first.start()
    try:
        run_id = await first.submit(job, "local")
        log = first.log_path(run_id, "run")
        await eventually_async(lambda: log.exists() and "line 3" in log.read_text())
        agent = int(first.run(run_id).node.offer["pid"])
    finally:
        await first.close(stop_running=False)
    run_dir = only_run_dir(tmp_path / "swjob-runs", "crashy")
    assert pid_alive(agent), "the node was stopped"
    assert not ownership.has_live_owner(run_id), "the lease outlived its engine"
    assert not any(e.kind == "finished" for e in read_events(run_dir / "events.jsonl"))
    release.touch()
    view = await recover(runs, pools, run_id)
    assert view.state == "COMPLETED", view.reason
    assert (run_dir / "logs" / "run.log").read_text().splitlines() == ["line 1", "line 2", "line 3"]
    assert (run_dir / "outputs" / "out.txt").read_text() == "done\n"
    assert not pid_alive(agent)
    assert list((cache_dir() / "nodes").iterdir()) == []
