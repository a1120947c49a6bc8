"""Local agents are forked by the operator's fork server: with their imports done, with
exactly the environment they are given, their exit codes seen, and no agent or server
left behind — whether a fork is given up, the server is killed, or its operator is."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from agent.credentials import TOKEN_ENV
from engine.jobs.jobspec import load_job
from engine.providers import forkserver, local
from engine.providers.local import FORKED
from engine.providers.localspawn import NODE_UMASK, fork_server, node_base_env
from tests.integration.agent_helpers import FakeOrchestrator
from tests.support.cli import Cli, swjob
from tests.support.leftovers import processes_under
from tests.support.processes import fork_servers, kill_own_fork_server, node_dirs, pid_alive
from tests.support.runs import agent_pid, events, waiting_job
from tests.support.waiting import eventually, eventually_async

HELLO = Path(__file__).parents[2] / "examples" / "hello" / "job.toml"


def _created_detail(run_dir: Path) -> str:
    boot = [e for e in events(run_dir) if e.kind == "boot" and e.phase == "instance_created"]
    return boot[0].detail or ""


def test_swjob_run_drives_its_run_with_a_forked_agent(tmp_path: Path) -> None:
    done = swjob("run", str(HELLO), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _created_detail(next((tmp_path / "runs" / "hello").iterdir())).endswith(FORKED)
    assert FORKED in done.stdout
    assert node_dirs() == []  # its node's directory went with the node, as any node's


async def test_an_engine_warming_its_agents_starts_the_server_before_any_run(
    make_engine,
) -> None:
    kill_own_fork_server()
    await make_engine(warm_agents=True)
    assert len(fork_servers(os.getpid())) == 1


async def test_a_forked_agent_that_ends_at_once_has_its_exit_code_seen(tmp_path: Path) -> None:
    """A usage error ends the agent before the server has even answered with its pid: the
    exit is still said after the pid, and its output is in the node's agent.log."""
    env = {**node_base_env(os.environ), TOKEN_ENV: "t"}
    agent = await fork_server().fork(["--no-such-flag"], env, tmp_path)
    assert await asyncio.wait_for(agent.wait(), 30) == 2
    assert "the following arguments are required" in (tmp_path / "agent.log").read_text()


async def test_a_forked_agent_has_only_the_environment_it_is_given(
    tmp_path: Path, make_engine, make_job, monkeypatch
) -> None:
    """The node's bare environment as it is at the fork, and the run's env: nothing the
    server started with and the operator has since dropped, nothing else of the operator's."""
    monkeypatch.setenv("SWJOB_PROBE_DROPPED", "1")
    kill_own_fork_server()
    fork_server()  # it starts with SWJOB_PROBE_DROPPED set
    monkeypatch.delenv("SWJOB_PROBE_DROPPED")
    monkeypatch.setenv("SWJOB_PROBE_ADDED", "1")
    monkeypatch.setenv("OPERATOR_ONLY", "operator's")
    engine = await make_engine()
    job = make_job(run="env > seen.txt", outputs=["seen.txt"], env={"ASKED": "yes"})
    view = await asyncio.wait_for(engine.wait(await engine.submit(job, "local")), 60)
    assert view.state == "COMPLETED", view.reason
    assert _created_detail(Path(view.run_dir)).endswith(FORKED)
    seen = (Path(view.run_dir) / "outputs" / "seen.txt").read_text().splitlines()
    assert "ASKED=yes" in seen and "SWJOB_PROBE_ADDED=1" in seen
    assert not [line for line in seen if line.startswith(("SWJOB_PROBE_DROPPED", "OPERATOR"))]
    assert not [line for line in seen if TOKEN_ENV in line]


async def test_a_fork_given_up_leaves_no_agent(tmp_path: Path) -> None:
    """A fork cancelled while the server still imports: the agent it then forks is ended
    as soon as its pid comes back, unused (a node that would join its operator, else)."""
    orch = await FakeOrchestrator.start("token")
    server = forkserver.ForkServer(node_base_env(os.environ), NODE_UMASK)  # still importing
    given_up, after = tmp_path / "given-up", tmp_path / "after"
    given_up.mkdir(), after.mkdir()
    try:
        argv = ["--run-id", "r", "--ticket", orch.ticket, "--orchestrator-id", orch.id]
        env = {**node_base_env(os.environ), TOKEN_ENV: orch.token}
        fork = asyncio.ensure_future(server.fork([*argv, "--root", str(given_up)], env, given_up))
        await asyncio.sleep(0.05)
        fork.cancel()
        # answers come in order: once the next fork's has, the given-up one's came too
        next_agent = await server.fork(["--no-such-flag"], env, after)
        assert await asyncio.wait_for(next_agent.wait(), 30) == 2
        await eventually_async(lambda: not processes_under(given_up), 30, "the agent ended")
        assert orch.hellos == []
    finally:
        server.kill()
        await orch.close()
    await eventually_async(lambda: not server.running, what="its end seen")
    await eventually_async(lambda: not pid_alive(server.pid), what="the server gone")


def test_an_agent_killed_before_its_go_leaves_the_server_serving(tmp_path: Path) -> None:
    """An operator gives up a fork and kills its agent as soon as its pid comes, which
    may be before the server has written that agent's go: the go finds no reader, and
    the server (every local node's) must go on, not die of the broken pipe (it did in
    4 of 10 runs of the test above). Made certain here: the server's stdout is full, so
    it has forked and waits to say the pid while its agent is killed."""
    env = {**node_base_env(os.environ), TOKEN_ENV: "t"}
    answers, full = os.pipe()
    fcntl.fcntl(full, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    os.write(full, b"#" * (PIPE_SIZE - 2) + b"\n")  # one byte free: no pid line fits
    server = subprocess.Popen(
        [sys.executable, "-m", "agent", forkserver.FLAG], env=env, umask=NODE_UMASK,
        stdin=subprocess.PIPE, stdout=full, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(full)
    assert server.stdin is not None
    try:
        server.stdin.write(_request(env, tmp_path))
        server.stdin.flush()
        eventually(lambda: psutil.Process(server.pid).children(), what="its fork")
        [agent] = psutil.Process(server.pid).children()
        # a fork holds both ends of its go pipe (one name) until it closes the server's
        eventually(lambda: len(_pipes(agent.pid)) == 1, what="the fork's end of its go pipe")
        [go] = _pipes(agent.pid)
        eventually(lambda: _pipes(server.pid).count(go) == 1, what="the server's end only")
        agent.kill()
        eventually(lambda: agent.status() == psutil.STATUS_ZOMBIE, what="the agent dead")
        with os.fdopen(answers, "rb") as said:
            assert said.readline().startswith(b"#")
            assert json.loads(said.readline()) == {"pid": agent.pid}
            assert json.loads(said.readline()) == {"exit": agent.pid, "code": -9}
            server.stdin.write(_request(env, tmp_path))  # and it still serves
            server.stdin.flush()
            assert "pid" in json.loads(said.readline())
            assert json.loads(said.readline())["code"] == 2
    finally:
        server.kill()
        assert b"Traceback" not in server.communicate()[1]


PIPE_SIZE = 4096


def _request(env: dict[str, str], root: Path) -> bytes:
    """A fork of an agent that fails at once (a usage error: code 2)."""
    return json.dumps({"argv": ["--no-such-flag"], "env": env, "root": str(root)}).encode() + b"\n"


def _pipes(pid: int) -> list[str]:
    """The pipes among the process's descriptors above stdin, stdout and stderr."""
    fds = Path(f"/proc/{pid}/fd")
    links = [os.readlink(fd) for fd in fds.iterdir() if int(fd.name) > 2]
    return [link for link in links if link.startswith("pipe:")]


async def test_a_killed_server_leaves_its_agents_running_and_is_replaced(
    tmp_path: Path, make_engine
) -> None:
    release = tmp_path / "release"
    engine = await make_engine()
    run_id = await engine.submit(load_job(waiting_job(tmp_path / "p", "held", release)), "local")
    run_dir = Path(engine.run(run_id).run_dir)
    await eventually_async(lambda: engine.run(run_id).state == "RUNNING", what="its step")
    agent = agent_pid(run_dir)
    assert _created_detail(run_dir).endswith(FORKED)
    [server] = fork_servers(os.getpid())
    await asyncio.to_thread(kill_own_fork_server)
    assert pid_alive(agent)  # the server's end is not its agents'
    release.touch()
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason  # its node's end is still seen
    assert not pid_alive(agent) and node_dirs() == []
    second = await engine.submit(load_job(waiting_job(tmp_path / "q", "next", release)), "local")
    view = await asyncio.wait_for(engine.wait(second), 60)
    assert view.state == "COMPLETED" and _created_detail(Path(view.run_dir)).endswith(FORKED)
    assert fork_servers(os.getpid()) not in ([], [server])  # a new one forked it


def test_an_operator_killed_9_takes_its_fork_server_along_but_not_its_agent(
    tmp_path: Path,
) -> None:
    """Its stdin closes with the operator: the server exits; the agent it forked lives on
    as any orphaned agent does (waiting for its operator to come back)."""
    job = waiting_job(tmp_path / "p", "held", tmp_path / "never")
    cli = Cli("run", str(job), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    agent = 0
    try:
        eventually(lambda: cli.has_printed("RunJob"), what="its step running")
        [server] = fork_servers(cli.pid)
        agent = agent_pid(next((tmp_path / "runs" / "held").iterdir()))
        cli.kill9()
        eventually(lambda: not pid_alive(server), timeout=30, what="the fork server gone")
        assert pid_alive(agent)
    finally:
        if cli.proc.poll() is None:
            cli.kill9()
        if agent:
            os.kill(agent, signal.SIGTERM)  # it stops its job and removes its node dir
            eventually(lambda: not pid_alive(agent), what="the orphan ended")


THREADED_PYTHON = """#!/bin/sh
echo started >> {starts}
exec {python} -c 'import runpy, sys, threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
sys.argv = ["agent", *sys.argv[3:]]
runpy.run_module("agent", run_name="__main__", alter_sys=True)' "$@"
"""
"""A python whose start-up runs a thread (a monitoring tool's sitecustomize, say)."""


async def test_a_server_with_threads_refuses_once_and_nodes_start_afresh(
    tmp_path: Path, make_engine, make_job, monkeypatch
) -> None:
    """A thread started at import would leave any lock it held locked in every child: the
    server exits without forking, and every node after starts its agent afresh, without
    a new server's imports to wait for first."""
    starts, wrapper = tmp_path / "starts", tmp_path / "python"
    wrapper.write_text(THREADED_PYTHON.format(starts=starts, python=sys.executable))
    wrapper.chmod(0o755)
    kill_own_fork_server()
    monkeypatch.setattr(forkserver, "_server", None)  # the refusal is this test's alone
    monkeypatch.setattr(sys, "executable", str(wrapper))
    engine = await make_engine()
    job = make_job(run="true")
    for _ in range(2):
        view = await asyncio.wait_for(engine.wait(await engine.submit(job, "local")), 60)
        assert view.state == "COMPLETED", view.reason
        assert not _created_detail(Path(view.run_dir)).endswith(FORKED)
    assert forkserver._server is not None and forkserver._server.refused
    # one server (refused), then the two agents afresh: no server started again
    assert starts.read_text().splitlines() == ["started"] * 3


async def test_a_server_that_does_not_answer_is_killed_and_the_node_starts_afresh(
    tmp_path: Path, make_engine, make_job, monkeypatch
) -> None:
    """A stopped (or stuck) server would hold every local run in provisioning: after
    FORK_ANSWER_S the node's agent is started afresh and the server killed, so the next
    node starts a new one."""
    answer_s = local.FORK_ANSWER_S
    monkeypatch.setattr(local, "FORK_ANSWER_S", 1.0)  # the stopped server's, shortened
    stopped = fork_server()
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        engine = await make_engine()
        job = make_job(run="true")
        first = await asyncio.wait_for(engine.wait(await engine.submit(job, "local")), 60)
        assert first.state == "COMPLETED", first.reason
        assert not _created_detail(Path(first.run_dir)).endswith(FORKED)
        await eventually_async(lambda: not stopped.running, what="the stopped server killed")
    finally:
        stopped.kill()  # never left stopped for the tests after this one
    # the new server starts and answers in the product's time: under load, more than 1 s
    monkeypatch.setattr(local, "FORK_ANSWER_S", answer_s)
    second = await asyncio.wait_for(engine.wait(await engine.submit(job, "local")), 60)
    assert _created_detail(Path(second.run_dir)).endswith(FORKED)


async def test_off_linux_nothing_is_forked_and_warming_is_no_error(
    make_engine, make_job, monkeypatch
) -> None:
    """Where no fork server is to be, an engine that warms its agents still starts, and
    its nodes' agents are started afresh."""
    monkeypatch.setattr(sys, "platform", "darwin")
    engine = await make_engine(warm_agents=True)
    view = await asyncio.wait_for(
        engine.wait(await engine.submit(make_job(run="true"), "local")), 60
    )
    assert view.state == "COMPLETED", view.reason
    assert not _created_detail(Path(view.run_dir)).endswith(FORKED)
