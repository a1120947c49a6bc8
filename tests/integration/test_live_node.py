"""The live node end to end: a shell in a real pseudo-terminal (pexpect driving the real
`swjob shell`) and TCP forwarding to an HTTP server the job starts — real agent, real iroh,
the CLI reaching the in-test engine through its local access point."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys

import pexpect
import pytest

from agent.livewire import ShellOpen
from engine.cli.live import check_port
from engine.engine import Engine
from engine.run.liveops import LiveUnavailable
from tests.support.http import fetch, free_port, served
from tests.support.processes import pid_alive
from tests.support.waiting import eventually_async

CLI = [sys.executable, "-m", "engine.cli"]
TIMEOUT_S = 20


async def running(engine: Engine, make_job, run: str, **fields: object) -> str:
    """Submit `run` and return its id once its `run` step is running on the node."""
    run_id = await engine.submit(make_job(run=run, **fields), "local")
    await eventually_async(lambda: (v := engine.run(run_id)) is not None and v.phase == "run")
    return run_id


async def stop(engine: Engine, run_id: str) -> None:
    await engine.stop(run_id)
    await asyncio.wait_for(engine.wait(run_id), 30)


class Terminal:
    """`swjob shell` in a real pseudo-terminal; pexpect's blocking calls run off the loop
    (the engine the shell talks to shares the test's event loop)."""

    def __init__(self, run_id: str, dimensions: tuple[int, int] = (24, 80)) -> None:
        self.child = pexpect.spawn(
            CLI[0], [*CLI[1:], "shell", run_id], dimensions=dimensions, timeout=TIMEOUT_S
        )

    async def expect(self, pattern: str) -> None:
        await asyncio.to_thread(self.child.expect, pattern)

    async def run(self, line: str, pattern: str) -> None:
        self.child.sendline(line)
        await self.expect(pattern)

    async def exit_status(self) -> int | None:
        await asyncio.to_thread(self.child.expect, pexpect.EOF)
        self.child.close()
        return self.child.exitstatus

    def close(self) -> None:
        self.child.close(force=True)


async def test_shell_runs_in_the_workdir_with_the_job_env_resizes_and_passes_ctrl_c(
    engine, make_job
) -> None:
    run_id = await running(engine, make_job, "sleep 60", env={"LIVE_GREETING": "hello-node"})
    term = Terminal(run_id)
    try:
        # what is typed is echoed too: each pattern matches only the command's output
        await term.run("echo MARK-$((6*7))", "MARK-42")
        await term.run('echo "G=$LIVE_GREETING"', "G=hello-node")
        await term.run('echo "W=$(pwd)"', r"W=/\S+/work\r\n")
        term.child.setwinsize(40, 120)  # the real SIGWINCH path: pty → swjob → node
        await term.run("stty size", r"40 120")
        await term.run("echo SLEEP$((1+1)); sleep 30", "SLEEP2")  # sleep starts next
        term.child.sendcontrol("c")
        await term.run('echo "RC=$?"', "RC=130")
        term.child.sendline("exit 7")
        assert await term.exit_status() == 7
    finally:
        term.close()
    await stop(engine, run_id)


async def test_shell_is_refused_once_the_run_is_over(engine, make_job) -> None:
    run_id = await running(engine, make_job, "sleep 60")
    await stop(engine, run_id)
    with pytest.raises(LiveUnavailable, match="over"):
        await engine.live.open(run_id, ShellOpen())
    proc = await asyncio.create_subprocess_exec(
        *CLI, "shell", run_id, stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL
    )
    _, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
    assert proc.returncode == 1
    assert f"run {run_id} is over (FAILED)" in err.decode()


async def test_console_forward_serves_concurrent_requests_and_closes_with_the_run(
    engine, make_job
) -> None:
    port = free_port()
    run = f"echo one > a.txt; echo two > b.txt; exec python3 -m http.server {port} --bind 127.0.0.1"
    run_id = await running(engine, make_job, run)
    with pytest.raises(LiveUnavailable, match="local port 70000 is not a TCP port"):
        await engine.live.forward(run_id, port, 70000)
    fwd = await engine.live.forward(run_id, port)
    assert await served(fwd.local_port, "a.txt") == "one\n"  # the node's server is up
    sock = socket.create_connection(("127.0.0.1", fwd.local_port))  # held open while others run
    try:
        a, b = await asyncio.gather(
            asyncio.to_thread(fetch, fwd.local_port, "a.txt"),
            asyncio.to_thread(fetch, fwd.local_port, "b.txt"),
        )
        assert (a, b) == ("one\n", "two\n")
        assert fwd.active >= 1  # the idle connection is still open beside them
    finally:
        sock.close()
    assert engine.live.forwards(run_id) == [fwd]
    await stop(engine, run_id)
    assert engine.live.forwards(run_id) == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", fwd.local_port), timeout=2).close()


async def test_cli_forward_reaches_the_node_and_ends_with_the_run(engine, make_job) -> None:
    port, local = free_port(), free_port()
    run = f"echo cli > c.txt; exec python3 -m http.server {port} --bind 127.0.0.1"
    run_id = await running(engine, make_job, run)
    proc = await asyncio.create_subprocess_exec(
        *CLI, "forward", run_id[:12], str(port), "--local", str(local),
        stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), TIMEOUT_S)
        assert f"127.0.0.1:{local} → node port {port}" in line.decode()
        assert await served(local, "c.txt") == "cli\n"
        await stop(engine, run_id)
        rest = await asyncio.wait_for(proc.stdout.read(), TIMEOUT_S)
        assert "forwarding stopped" in rest.decode()
        assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_forward_to_a_closed_node_port_closes_that_connection_and_says_why(
    engine, make_job
) -> None:
    run_id = await running(engine, make_job, "sleep 60")
    closed = free_port()  # nothing listens there on the node (this machine)
    fwd = await engine.live.forward(run_id, closed)
    reader, writer = await asyncio.open_connection("127.0.0.1", fwd.local_port)
    assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""  # closed, not hung
    writer.close()
    await eventually_async(lambda: fwd.errors)
    assert fwd.errors[-1].startswith(f"node port {closed}: ")
    assert fwd.active == 0 and fwd.served == 1
    await stop(engine, run_id)


async def remote_pid(term: Terminal) -> int:
    term.child.sendline('echo "PID=$(( $$ + 0 ))"')
    await term.expect(r"PID=(\d+)\r\n")
    return int(term.child.match.group(1))


async def test_a_run_that_ends_hangs_up_its_open_shell(engine, make_job) -> None:
    """Stopping the run ends an open shell: the client exits with the status the node saw
    (killed: 128+N) or, if the connection went first, 255; the shell's process is gone."""
    run_id = await running(engine, make_job, "sleep 60")
    term = Terminal(run_id)
    try:
        pid = await remote_pid(term)
        await stop(engine, run_id)
        status = await term.exit_status()
        assert status is not None and status > 128, status
    finally:
        term.close()
    assert not pid_alive(pid)


async def test_a_killed_shell_client_leaves_nothing_running_on_the_node(engine, make_job) -> None:
    """The operator's end vanishing (kill -9 of `swjob shell`) hangs up the remote shell."""
    run_id = await running(engine, make_job, "sleep 60")
    term = Terminal(run_id)
    try:
        pid = await remote_pid(term)
        os.kill(term.child.pid, signal.SIGKILL)
        await eventually_async(lambda: not pid_alive(pid))
    finally:
        term.close()
    assert engine.run(run_id).state == "RUNNING"  # the job itself is untouched
    await stop(engine, run_id)


async def test_a_shell_opened_during_setup_survives_the_end_of_the_step(engine, make_job) -> None:
    """A step's end sweeps whatever the step left behind; an operator's shell is not that."""
    job = make_job(setup="sleep 1", run="sleep 60")
    run_id = await engine.submit(job, "local")
    await eventually_async(lambda: (v := engine.run(run_id)) is not None and v.phase == "setup")
    term = Terminal(run_id)
    try:
        pid = await remote_pid(term)
        await eventually_async(lambda: engine.run(run_id).phase == "run")  # setup's sweep is over
        await term.run("echo MARK-$((6*7))", "MARK-42")
        assert pid_alive(pid)
        term.child.sendline("exit 0")
        assert await term.exit_status() == 0
    finally:
        term.close()
    await stop(engine, run_id)


async def test_a_shell_from_a_terminal_without_a_size_gets_80x24(engine, make_job) -> None:
    """A fresh pty (and some IDE and serial terminals) reports 0×0: it ended in a
    traceback; the shell now opens at 80×24."""
    run_id = await running(engine, make_job, "sleep 60")
    term = Terminal(run_id, dimensions=(0, 0))
    try:
        await term.run("stty size", r"24 80")
        term.child.sendline("exit 3")
        assert await term.exit_status() == 3
    finally:
        term.close()
    await stop(engine, run_id)


async def test_forward_refuses_a_port_that_is_not_one_in_one_line() -> None:
    proc = await asyncio.create_subprocess_exec(
        *CLI, "forward", "no-such-run", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
    assert proc.returncode == 1 and out == b""
    assert err.decode() == "error: node port 0 is not a TCP port (1-65535)\n"
    for port, what in ((70000, "node port"), (0, "local port"), (-1, "local port")):
        with pytest.raises(LiveUnavailable, match=f"^{what} {port} is not a TCP port"):
            check_port(port, what)
    check_port(None, "local port")  # none given: the private Unix socket
