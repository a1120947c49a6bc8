"""The real `swjob-agent` process against a minimal orchestrator on loopback iroh."""

from __future__ import annotations

import platform
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

import agent
from agent import steprecord
from agent.lines import LOG_FAILED
from agent.protocol import (
    NodeFault,
    RunStep,
    Shutdown,
    Step,
    StepExited,
    StepStarted,
    StopStep,
)
from agent.reattach import new_key, public_of
from agent.redact import MASK
from engine.run.reclaim import ReclaimRefused, reclaim
from tests.integration.agent_helpers import (
    REATTACH_KEY,
    AgentProc,
    FakeOrchestrator,
    files_containing,
    kill_leftover_group,
)
from tests.support.processes import pid_alive
from tests.support.waiting import eventually_async

TOKEN = "join-token-4f1d9c2b7a"
SECRET = "sk-live-0123456789abcdef"
TREE = "sleep 1000 & echo pid $!; sh -c 'trap \"\" TERM; echo pid $$; exec sleep 1000' & wait"

StartAgent = Callable[..., Awaitable[AgentProc]]


@pytest.fixture
async def orch() -> AsyncIterator[FakeOrchestrator]:
    o = await FakeOrchestrator.start(TOKEN)
    yield o
    await o.close()


@pytest.fixture
async def start_agent(tmp_path: Path) -> AsyncIterator[StartAgent]:
    started: list[AgentProc] = []

    async def start(o: FakeOrchestrator, *args: str, **kw: str) -> AgentProc:
        proc = await AgentProc.start(o, tmp_path / f"node{len(started)}", *args, **kw)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        await proc.kill()
        kill_leftover_group(proc.root)


async def joined(o: FakeOrchestrator) -> None:
    await o.until(lambda: o.channel is not None)


async def step_exited(o: FakeOrchestrator, count: int = 1) -> StepExited:
    await o.until(lambda: len(o.of_type(StepExited)) >= count)
    return o.of_type(StepExited)[-1]


async def test_join_sends_facts_and_keeps_xfer_dialed(
    orch: FakeOrchestrator, start_agent: StartAgent
) -> None:
    node = await start_agent(orch)
    await joined(orch)
    hello = orch.hellos[0]
    assert (hello.run_id, hello.token) == ("run-1", TOKEN)
    facts = hello.facts
    assert facts.hostname == platform.node()
    assert facts.cpus >= 1 and facts.memory_mb > 0 and facts.disk_free_mb > 0
    assert facts.agent_version == agent.__version__
    assert facts.python_version == platform.python_version()
    await orch.until(lambda: len(orch.xfer_conns) >= 1)
    dialed = len(orch.xfer_conns)  # counted, not assumed: a busy host may see a redial already
    orch.xfer_conns[-1].close(0, b"test drop")
    await orch.until(lambda: len(orch.xfer_conns) > dialed)  # redialed; control untouched
    assert len(orch.hellos) == 1
    await orch.send(Shutdown())
    assert await node.exit_code() == 0


async def test_setup_then_run_with_logs_exit_code_and_no_leaks(
    orch: FakeOrchestrator, start_agent: StartAgent
) -> None:
    node = await start_agent(orch)
    await joined(orch)
    await orch.send(RunStep(step=Step.SETUP, command="echo setting up; touch made-by-setup"))
    setup = await step_exited(orch)
    assert (setup.step, setup.code) == (Step.SETUP, 0)
    run = (
        'ls; echo "key=$API_KEY"; echo "tok=${SWJOB_JOIN_TOKEN:-unset}"; '
        'echo "rk=${SWJOB_REATTACH_KEY:-unset}"; echo oops >&2; exit 3'
    )
    await orch.send(RunStep(step=Step.RUN, command=run, env={"API_KEY": SECRET}))
    exited = await step_exited(orch, 2)
    assert (exited.step, exited.code, exited.stopped) == (Step.RUN, 3, False)
    assert orch.lines() == [
        "setting up", "made-by-setup", f"key={MASK}", "tok=unset", "rk=unset", "oops"
    ]  # fmt: skip
    assert [e.seq for e in orch.events] == list(range(1, len(orch.events) + 1))
    assert (node.root / "logs" / "setup.log").read_text() == "setting up\n"
    assert "[stderr] oops" in (node.root / "logs" / "run.log").read_text()
    await orch.send(Shutdown())
    assert await node.exit_code() == 0
    for needle in (TOKEN, SECRET, REATTACH_KEY):
        assert files_containing(node.root, needle) == []
        assert needle not in node.stderr()


async def test_stop_step_kills_the_whole_tree(
    orch: FakeOrchestrator, start_agent: StartAgent
) -> None:
    node = await start_agent(orch)
    await joined(orch)
    await orch.send(RunStep(step=Step.RUN, command=TREE))
    await orch.until(lambda: len(orch.pids()) == 3)
    pids = orch.pids()
    record = steprecord.read(node.root / "state" / "step.pgid")
    assert record is not None and record.pgid == pids[-1]
    assert all(pid_alive(p) for p in pids)
    await orch.send(StopStep(grace_s=0.3))
    exited = await step_exited(orch)
    assert exited.stopped and exited.code == 143
    assert not any(pid_alive(p) for p in pids)
    assert not (node.root / "state" / "step.pgid").exists()


async def test_second_run_step_while_busy_is_a_fault(
    orch: FakeOrchestrator, start_agent: StartAgent
) -> None:
    await start_agent(orch)
    await joined(orch)
    await orch.send(RunStep(step=Step.SETUP, command="sleep 1000"))
    await orch.until(lambda: bool(orch.of_type(StepStarted)))
    await orch.send(RunStep(step=Step.RUN, command="true"))
    await orch.until(lambda: bool(orch.of_type(NodeFault)))
    assert "another step is running" in orch.of_type(NodeFault)[0].reason
    await orch.send(StopStep(grace_s=0.2))
    assert (await step_exited(orch)).stopped


async def test_wrong_orchestrator_id_is_never_obeyed_and_the_node_waits_for_its_own(
    orch: FakeOrchestrator, start_agent: StartAgent
) -> None:
    """The peer at the address is not ours: no Hello is ever sent to it; the agent keeps
    redialing (its owner or an adopter may yet come) until its orphan timeout."""
    node = await start_agent(orch, "--orphan-timeout", "2", orchestrator_id="ab" * 32)
    assert await node.exit_code() == 5
    assert orch.hellos == []
    assert node.stderr().count("obeys only") >= 2  # redialed, never obeyed


async def test_reject_exits_3(start_agent: StartAgent) -> None:
    o = await FakeOrchestrator.start(TOKEN, reject="run is over")
    try:
        node = await start_agent(o)
        assert await node.exit_code() == 3
        assert "run is over" in node.stderr()
    finally:
        await o.close()


async def test_dropped_connection_redials_and_replays_missed_events(
    orch: FakeOrchestrator, start_agent: StartAgent
) -> None:
    node = await start_agent(orch)
    await joined(orch)
    gate = node.root / "work" / "go"
    cmd = f"echo one; echo two; while [ ! -e {gate} ]; do sleep 0.02; done; echo three"
    await orch.send(RunStep(step=Step.RUN, command=cmd))
    await orch.until(lambda: orch.lines() == ["one", "two"])
    orch.forget_after(1)  # StepStarted stored; the log batch "lost" with the connection
    orch.channel = None
    orch.drop()
    gate.touch()  # the job goes on while the node is alone
    await orch.until(lambda: len(orch.hellos) == 2 and orch.channel is not None)
    exited = await step_exited(orch)
    assert exited.code == 0
    assert orch.lines() == ["one", "two", "three"]
    assert [e.seq for e in orch.events] == list(range(1, len(orch.events) + 1))
    assert orch.received.count(2) == 2  # the lost batch came twice: live, then replayed
    assert orch.hellos[1].token == TOKEN


async def test_silent_orchestrator_counts_as_lost(
    orch: FakeOrchestrator, start_agent: StartAgent
) -> None:
    await start_agent(orch, "--deadline", "0.8")
    await joined(orch)
    orch.silent = True
    silenced = time.monotonic()
    await orch.until(lambda: len(orch.hellos) == 2)
    orch.silent = False
    assert time.monotonic() - silenced >= 0.8, "redialled before its deadline passed"
    assert orch.hellos[1].run_id == orch.hellos[0].run_id


@pytest.mark.parametrize("how", ["message", "sigterm"])
async def test_shutdown_exits_0_and_leaves_no_job_process(
    orch: FakeOrchestrator, start_agent: StartAgent, how: str
) -> None:
    node = await start_agent(orch)
    await joined(orch)
    await orch.send(RunStep(step=Step.RUN, command=TREE))
    await orch.until(lambda: len(orch.pids()) == 3)
    pids = orch.pids()
    if how == "message":
        await orch.send(Shutdown())
    else:
        node.proc.send_signal(signal.SIGTERM)
    assert await node.exit_code() == 0
    assert not any(pid_alive(p) for p in pids)
    # delivered before the agent hung up (its log says what it did, should it not be)
    try:
        exited = await step_exited(orch)
    except TimeoutError:
        raise AssertionError(f"no StepExited; the agent said:\n{node.stderr()}") from None
    assert exited.stopped and exited.code == 143


async def test_orphaned_agent_stops_the_job_and_exits_5(start_agent: StartAgent) -> None:
    o = await FakeOrchestrator.start(TOKEN)
    node = await start_agent(o, "--orphan-timeout", "1")
    await joined(o)
    await o.send(RunStep(step=Step.RUN, command=TREE))
    await o.until(lambda: len(o.pids()) == 3)
    pids = o.pids()
    await o.close()  # the orchestrator is gone for good
    assert await node.exit_code() == 5
    assert not any(pid_alive(p) for p in pids)
    assert "no orchestrator" in node.stderr()


RECORDED = "until [ -f ../state/step.pgid ]; do sleep 0.01; done; "
"""Each wreck waits for the agent's step record (written just after the spawn, in state/):
a job that wrecks state/ before it races that write, and what it prints then depends on
the race — `rm -rf ../state` said "Directory not empty" when the record landed between
its unlinks and its rmdir (a loaded machine, 1 run in ~20), and `echo junk > ../state`
failed on the directory the agent's write had made again. The agent relays what the job
printed, rightly; the lines under test are the job's own `before` and `after`."""


@pytest.mark.parametrize(
    "wreck",
    [
        # the pgid file becomes a directory
        RECORDED + "rm ../state/step.pgid; mkdir ../state/step.pgid",
        RECORDED + "rm -rf ../state",  # the agent's state dir deleted, journal and all
        RECORDED + "rm -rf ../state; echo junk > ../state",  # ... and replaced by a file
        # names taken by directories
        RECORDED + "rm -rf ../state ../logs; mkdir -p ../state/events.jsonl",
    ],
)
async def test_a_job_that_wrecks_the_agent_state_still_ends_and_replays(
    orch: FakeOrchestrator, start_agent: StartAgent, wreck: str
) -> None:
    """Whatever the job does to the files next to its workdir, its StepExited arrives, and a
    redial replays every event from the agent's own journal (held open, not re-read by name)."""
    node = await start_agent(orch)
    await joined(orch)
    await orch.send(RunStep(step=Step.RUN, command=f"echo before; {wreck}; echo after; exit 7"))
    exited = await step_exited(orch)
    assert (exited.step, exited.code) == (Step.RUN, 7)
    await orch.until(lambda: orch.stored_seq > 0)
    orch.forget_after(0)  # everything "lost": the agent must replay it all
    orch.channel = None
    orch.drop()
    await orch.until(lambda: len(orch.hellos) == 2 and len(orch.of_type(StepExited)) == 1)
    # the job's lines, all of them, in order; the agent may add its own note that its log
    # of them could not be written (the job removed its directory under it: a race)
    assert [line for line in orch.lines() if not line.startswith(LOG_FAILED)] == [
        "before",
        "after",
    ]
    assert [e.seq for e in orch.events] == list(range(1, len(orch.events) + 1))
    await orch.send(RunStep(step=Step.RUN, command="echo again"))  # the agent still serves
    assert (await step_exited(orch, 2)).code == 0
    await orch.send(Shutdown())
    assert await node.exit_code() == 0


# ---- re-attach: an adopting engine proves the run's credential ---------------------------


@pytest.fixture
async def pair() -> AsyncIterator[tuple[FakeOrchestrator, FakeOrchestrator]]:
    first = await FakeOrchestrator.start(TOKEN)
    second = await FakeOrchestrator.start(TOKEN)
    yield first, second
    await first.close()
    await second.close()


async def test_the_agent_follows_only_an_engine_that_proves_the_credential(
    pair: tuple[FakeOrchestrator, FakeOrchestrator], start_agent: StartAgent
) -> None:
    first, second = pair
    await start_agent(first)
    await joined(first)
    await first.send(RunStep(step=Step.RUN, command="echo before; sleep 300"))
    await first.until(lambda: "before" in first.lines())
    ticket = first.hellos[0].ticket
    assert ticket is not None, "the agent tells its orchestrator where to reach it"

    with pytest.raises(ReclaimRefused, match="bad re-attach proof"):
        await reclaim(second.ep, ticket, "run-1", new_key())  # another run's secret
    with pytest.raises(ReclaimRefused, match="bad re-attach proof"):  # all the node knows
        await reclaim(second.ep, ticket, "run-1", public_of(REATTACH_KEY))
    with pytest.raises(ReclaimRefused, match="not this node's run"):
        await reclaim(second.ep, ticket, "run-2", REATTACH_KEY)
    assert second.hellos == [] and first.channel is not None  # nothing moved

    await reclaim(second.ep, ticket, "run-1", REATTACH_KEY)  # positive control
    await second.until(lambda: len(second.hellos) == 1)
    hello = second.hellos[0]
    assert hello.busy and hello.token == TOKEN  # same job, still running, same join proof
    await second.until(lambda: "before" in second.lines())  # the journal replays to it


async def test_a_node_whose_orchestrator_died_follows_an_adopter_at_once(
    pair: tuple[FakeOrchestrator, FakeOrchestrator], start_agent: StartAgent
) -> None:
    """Its old orchestrator is gone (dials to it hang until the dial timeout, 10 s): a
    valid resume drops the hanging dial and the node joins the adopter within seconds."""
    first, second = pair
    node = await start_agent(first)
    await joined(first)
    ticket = first.hellos[0].ticket
    assert ticket is not None
    await first.close()  # the operator dies; the node redials a dead address
    await eventually_async(  # mid-dial: a dead address answers nothing until the dial times out
        lambda: node.stderr().count("dialing orchestrator") == 2, 30, "the node redialing"
    )
    started = time.monotonic()
    await reclaim(second.ep, ticket, "run-1", REATTACH_KEY)
    await second.until(lambda: len(second.hellos) == 1, timeout=5)
    assert time.monotonic() - started < 5
    # and it exits promptly when stopped: its endpoint's close waited out the abandoned
    # dial's draining (the whole 3 s close bound) before
    asked = time.monotonic()
    await node.kill()
    assert node.proc.returncode == 0 and time.monotonic() - asked < 2.5
