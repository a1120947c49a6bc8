"""Security through real runs and real peers: nobody but the operator can make a
node do anything, transfers never write outside the node's workdir or the landing dir, and
hostile trees are refused both ways. (Tokens, unadmitted transfer peers and crafted frames
against the bare services are in tests/integration/test_control_admission.py and
test_transfer_hostile.py; secrets in failure paths are in test_security_secrets.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from iroh import iroh_ffi

from agent import endpoint as iroh_endpoint
from agent.protocol import CTL_ALPN, XFER_ALPN, Channel, Hello, NodeFacts, Reject, RunStep, Step
from agent.reattach import new_key
from agent.transfer import TransferError, wire
from agent.transfer.server import serve_transfer
from engine.engine import Engine
from engine.report import events as ev
from engine.run.reclaim import ReclaimRefused, reclaim
from engine.run.transfer import pull_outputs, push_workspace
from engine.state.paths import cache_dir
from tests.support.engines import engine_with
from tests.support.runs import run_json
from tests.support.tap import Tap

pytestmark = [pytest.mark.timeout(90)]

FACTS = NodeFacts(
    hostname="rogue", os="linux", cpus=1, memory_mb=1, disk_free_mb=1,
    python_version="3.11", agent_version="0",
)  # fmt: skip
ROGUE_CMD = "touch {marker}"
DIAL_S = 2.0


@contextlib.asynccontextmanager
async def rogue(accept: bool = False):
    """A stranger's iroh endpoint on loopback, closed afterwards."""
    ep = await iroh_endpoint.bind(accept=accept)
    try:
        yield ep
    finally:
        await ep.close()


async def started(engine: Engine, tap: Tap, job: Any) -> str:
    """Submit `job` and wait until its run step printed `started`."""
    run_id = await engine.submit(job, "local")
    await tap.until(
        lambda e: (
            e.run_id == run_id
            and isinstance(e, ev.Log)
            and any(line.text == "started" for line in e.lines)
        )
    )
    return run_id


def udp_ports(pid: int) -> list[int]:
    """The UDP ports a process has bound (its iroh sockets), from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = []
    for table in ("udp", "udp6"):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            if fields[9] in inodes:
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


# ---- nobody but the orchestrator ------------------------------------------------------


async def test_the_agent_serves_strangers_nothing(tmp_path, make_job, record_fault) -> None:
    """The node dials out; the one service it answers is re-attach, which wants the run's
    credential: dialed with the control or transfer ALPN it completes no handshake, and a
    stranger's resume without the credential is refused — the job runs on untouched."""
    async with engine_with(tmp_path / "runs") as engine, rogue() as stranger:
        tap = Tap(engine)
        run_id = await started(engine, tap, make_job(run="echo started; sleep 300"))
        node_id = engine._server.sessions[run_id].endpoint_id
        agent_pid = int(engine.run(run_id).node.offer["pid"])
        addr = loopback_addr(node_id, udp_ports(agent_pid))
        # the same kind of address reaches an endpoint that does accept: the engine's
        own = loopback_addr(
            str(engine._endpoint.id()), [iroh_endpoint.bound_port(engine._endpoint)]
        )
        (await asyncio.wait_for(stranger.connect(own, CTL_ALPN), DIAL_S)).close(0, b"bye")
        for alpn in (CTL_ALPN, XFER_ALPN):
            with pytest.raises((TimeoutError, iroh_ffi.IrohError)):
                await asyncio.wait_for(stranger.connect(addr, alpn), DIAL_S)
        ticket = engine._drivers[run_id].recovery["agent_ticket"]
        with pytest.raises(ReclaimRefused, match="bad re-attach proof"):
            await reclaim(stranger, ticket, run_id, new_key())  # a guessed secret
        assert engine.run(run_id).state == "RUNNING"  # the job was not disturbed
        await engine.stop(run_id)
        view = await asyncio.wait_for(engine.wait(run_id), 30)
        tap.close()
    assert view.reason == "stopped by operator"
    record_fault(
        "stranger dials the agent (ctl, xfer and resume ALPN)",
        None,
        "no ctl/xfer handshake; resume without the credential refused; job untouched",
    )


def loopback_addr(endpoint_id: str, ports: list[int | None]) -> Any:
    hosts = [f"127.0.0.1:{p}" for p in ports if p]
    assert hosts, "no UDP port found"
    return iroh_ffi.EndpointAddr(iroh_ffi.EndpointId.from_string(endpoint_id), None, hosts)


class _RogueLink:
    """engine.run.transfer's XferLink over a rogue's own connection to the engine."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def open_bi(self) -> Any:
        return await self.conn.open_bi()


async def test_a_rogue_peer_cannot_use_the_engine_during_a_live_run(
    tmp_path, make_job, record_fault, caplog: pytest.LogCaptureFixture, monkeypatch
) -> None:
    caplog.set_level(logging.INFO, logger="swjob.control")
    # the rogue drives the engine's own transfer client, which retries a refused connection
    # as a dropped one: every attempt still meets the refusal, without the production backoff
    monkeypatch.setattr("engine.run.transfer.BACKOFF_S", 0.01)
    job = make_job(
        run="echo started; cat in.txt > out.txt; sleep 1",
        files={"in.txt": "operator data\n"},
        workspace={"workdir": "."},
        outputs=["out.txt"],
    )
    stolen = tmp_path / "stolen"  # where the rogue would land what the engine sent it
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "out.txt").write_text("rogue data\n")
    async with engine_with(tmp_path / "runs") as engine, rogue() as stranger:
        tap = Tap(engine)
        run_id = await started(engine, tap, job)
        addr = iroh_endpoint.addr_from_ticket(iroh_endpoint.ticket_of(engine._endpoint))
        # control: a hello with a guessed token is refused; a transfer record instead of a
        # hello is dropped; neither gets a command to the node
        conn = await stranger.connect(addr, CTL_ALPN)
        bi = await conn.open_bi()
        channel = Channel(bi.recv(), bi.send())
        await channel.send(Hello(run_id=run_id, token="guessed-token", facts=FACTS))
        assert await asyncio.wait_for(channel.recv(), 30) == Reject(reason="wrong join token")
        conn = await stranger.connect(addr, CTL_ALPN)
        bi = await conn.open_bi()
        await bi.send().write_all(wire.record({"t": "req", "op": "push", "session": "s"}))
        await bi.send().finish()
        await asyncio.wait_for(conn.closed(), 15)
        # transfer: serve the node side on the rogue connection (would the engine push the
        # workspace to it?) and use the transfer client on it (push / pull)
        xfer = await stranger.connect(addr, XFER_ALPN)
        serving = asyncio.create_task(serve_transfer(xfer, stolen))
        link = _RogueLink(xfer)
        with pytest.raises((TransferError, iroh_ffi.IrohError)):
            await push_workspace(link, planted, [], lambda p: None)
        with pytest.raises((TransferError, iroh_ffi.IrohError)):
            await pull_outputs(link, ["out.txt"], tmp_path / "rogue-run", lambda p: None)
        reason = await asyncio.wait_for(xfer.closed(), 30)
        await asyncio.wait_for(serving, 30)
        view = await asyncio.wait_for(engine.wait(run_id), 60)
        tap.close()
    assert "not admitted" in str(reason)
    assert view.state == "COMPLETED", view.reason
    assert (view.run_dir / "outputs" / "out.txt").read_text() == "operator data\n"
    assert not any(stolen.rglob("*")), "the engine sent something to the rogue"
    refusals = [r.getMessage() for r in caplog.records if r.name == "swjob.control"]
    assert any("wrong join token" in m for m in refusals), refusals
    assert any("no valid hello" in m or "not hello" in m for m in refusals), refusals
    assert any("unadmitted peer" in m for m in refusals), refusals
    record_fault(
        "rogue endpoint dials the engine mid-run (guessed token, junk, transfer push/pull)",
        None,
        "each refused and logged on swjob.control; run COMPLETED with the operator's data",
    )


async def test_an_agent_given_a_rogue_ticket_obeys_it_never_and_runs_nothing(
    tmp_path, record_fault
) -> None:
    """The ticket leads to an endpoint that is not the orchestrator the agent was told to
    obey: it hangs up before any stream, whatever the rogue sends it."""
    marker = tmp_path / "pwned"
    pushed: list[str] = []

    async def impostor(ep: Any) -> None:
        while (incoming := await ep.accept_next()) is not None:
            with contextlib.suppress(Exception):
                conn = await (await incoming.accept()).connect()
                bi = await conn.open_bi()
                await Channel(bi.recv(), bi.send()).send(
                    RunStep(step=Step.RUN, command=ROGUE_CMD.format(marker=marker), env={})
                )
                pushed.append("sent")

    (tmp_path / "node").mkdir()
    async with rogue(accept=True) as fake, rogue() as real:
        serve = asyncio.create_task(impostor(fake))
        env = {**os.environ, "SWJOB_JOIN_TOKEN": "tok-" + "x" * 20}
        agent = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent",
            "--run-id", "r1", "--ticket", iroh_endpoint.ticket_of(fake),
            "--orchestrator-id", str(real.id()), "--root", str(tmp_path / "node"),
            "--orphan-timeout", "2", env=env, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            _, err = await asyncio.wait_for(agent.communicate(), 30)
        finally:
            if agent.returncode is None:
                agent.kill()
                await agent.wait()
            serve.cancel()
            await asyncio.gather(serve, return_exceptions=True)
    assert agent.returncode == 5, err.decode()  # never obeyed; gave up as an orphan
    assert f"this agent obeys only {real.id()}" in err.decode()
    assert not marker.exists()
    assert not any((tmp_path / "node" / "work").iterdir())
    events = (tmp_path / "node" / "state" / "events.jsonl").read_text()
    assert events == ""  # no step was ever started
    record_fault(
        "agent started with a rogue ticket", None, "never obeyed; ran nothing; orphan exit"
    )


# ---- transfers stay inside their roots -------------------------------------------------


def _hostile_tree(root: Path, outside: Path) -> None:
    """Links pointing out (absolute and `..`), a link inside, a fifo and a device node."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "keep.txt").write_text("kept\n")
    os.symlink("/etc/passwd", root / "passwd")
    os.symlink(str(outside / "abs-target"), root / "abs")
    os.symlink("../../x", root / "up")
    os.symlink("keep.txt", root / "inside")
    os.mkfifo(root / "pipe")
    os.mknod(root / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # like /dev/null


async def test_a_hostile_workspace_is_pushed_without_escaping(
    tmp_path, make_job, record_fault
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "project"
    _hostile_tree(project, outside)
    passwd = Path("/etc/passwd").stat().st_mtime_ns
    report = "find . -name job.toml -prune -o -print | sort; readlink inside"
    job = make_job(run=report, workspace={"workdir": "."})
    nodes = cache_dir() / "nodes"
    async with engine_with(tmp_path / "runs") as engine:
        view = await asyncio.wait_for(engine.wait(await engine.submit(job, "local")), 60)
    log = (view.run_dir / "logs" / "run.log").read_text().split()
    assert view.state == "COMPLETED", view.reason
    assert log == [".", "./inside", "./keep.txt", "keep.txt"]  # the inside link, as a link
    assert not (nodes / "x").exists() and not (outside / "abs-target").exists()
    assert Path("/etc/passwd").stat().st_mtime_ns == passwd
    record_fault(
        "workspace with links out (/etc/passwd, abs, ../..), a fifo, a char device",
        None,
        "links out, fifo and device left on the operator side; link inside kept as a link; "
        "nothing written outside the node workdir",
    )


async def test_workspace_refusals_are_recorded_in_run_json(tmp_path, make_job) -> None:
    _hostile_tree(tmp_path / "project", tmp_path)
    job = make_job(run="true", workspace={"workdir": "."})
    async with engine_with(tmp_path / "runs") as engine:
        view = await asyncio.wait_for(engine.wait(await engine.submit(job, "local")), 60)
    assert view.state == "COMPLETED", view.reason
    recorded = json.dumps(run_json(view.run_dir))
    for name in ("passwd", "abs", "up", "pipe", "null"):
        assert f"refused {name!r}" in recorded or f"symlink {name!r}" in recorded, name


@pytest.mark.parametrize("direction", ["push", "pull"])
async def test_a_name_with_a_line_break_is_refused_not_fatal(
    tmp_path, make_job, direction: str
) -> None:
    odd = "new\nline.txt"
    if direction == "push":
        (tmp_path / "project").mkdir()
        (tmp_path / "project" / odd).write_text("x")
        job = make_job(run="ls", workspace={"workdir": "."})
    else:
        job = make_job(
            run="mkdir out && printf x > \"$(printf 'out/new\\nline.txt')\"", outputs=["out"]
        )
    async with engine_with(tmp_path / "runs") as engine:
        view = await asyncio.wait_for(engine.wait(await engine.submit(job, "local")), 60)
    node_dirs = list((cache_dir() / "nodes").glob("*"))
    assert not node_dirs and not list((view.run_dir / "outputs").rglob("new*"))  # safe today
    assert view.state == "COMPLETED", view.reason
    refused = (
        run_json(view.run_dir)["workspace_refused"]
        if direction == "push"
        else json.loads((view.run_dir / "manifest.json").read_text())["refused"]
    )
    assert [line for line in refused if "new\\nline.txt" in line], refused  # the name, escaped


async def test_hostile_outputs_are_pulled_without_escaping(
    tmp_path, make_job, record_fault
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    make_outputs = (
        "mkdir out && echo data > out/data.txt && ln -s data.txt out/inside && "
        "ln -s /etc/passwd out/passwd && ln -s ../../../x out/up && "
        f"ln -s {outside}/abs-target out/abs && mkfifo out/pipe && "
        "ln -s /etc/passwd top-link"
    )
    job = make_job(run=make_outputs, outputs=["out", "top-link"])
    runs = tmp_path / "runs"
    async with engine_with(runs) as engine:
        view = await asyncio.wait_for(engine.wait(await engine.submit(job, "local")), 60)
    landed = view.run_dir / "outputs"
    assert view.state == "COMPLETED", view.reason
    assert (landed / "out" / "data.txt").read_text() == "data\n"
    assert os.readlink(landed / "out" / "inside") == "data.txt"  # collected as a link
    names = sorted(p.name for p in (landed / "out").iterdir())
    assert names == ["data.txt", "inside"]
    assert not (landed / "top-link").exists() and not (landed / "top-link").is_symlink()
    assert not (runs / "x").exists() and not (outside / "abs-target").exists()
    manifest = json.loads((view.run_dir / "manifest.json").read_text())
    for name in ("passwd", "up", "abs", "pipe", "top-link"):
        assert any(name in line for line in manifest["refused"]), (name, manifest["refused"])
    record_fault(
        "job outputs: links out, a fifo, a declared link out",
        None,
        "each refused and listed in manifest.json; link inside collected as a link; "
        "nothing written outside the landing dir",
    )
