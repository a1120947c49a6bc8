"""A run has one live owner; `swjob run` drives only its own run and
ends with it; adopters (`swjob attach`) carry on runs whose owner died — whoever it was
and whatever became of its pool — and a node that never rejoins ends FAILED in bounds.

Every test runs real `swjob` processes (kill -9 included) against real agents."""

from __future__ import annotations

import io
import os
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from engine.cli.runlist import print_runs
from engine.state import ownership
from engine.state.paths import cache_dir, default_pools_file, state_dir
from tests.support.cli import Cli
from tests.support.processes import kill_quietly, pid_alive
from tests.support.runs import (
    agent_pid,
    events,
    finished,
    finished_at,
    only_run_dir,
    run_json,
    waiting_job,
)
from tests.support.waiting import eventually

Start = Callable[..., Cli]
EXIT_BOUND_S = 2.0
DEADLINE_S = 2


def _run(start: Start, tmp_path: Path, name: str, *extra: str) -> tuple[Cli, Path, Path]:
    """`swjob run` of a waiting job called `name`; returns (process, run dir, release file)."""
    release = tmp_path / f"release-{name}"
    job = waiting_job(tmp_path / name, name, release)
    cli = start("run", str(job), "--runs-dir", str(tmp_path / "runs"), *extra, cwd=tmp_path)
    run_dir = only_run_dir(tmp_path / "runs", name)
    eventually(lambda: "line 3" in _log(run_dir), what=f"{name} running")
    return cli, run_dir, release


def _log(run_dir: Path) -> str:
    path = run_dir / "logs" / "run.log"
    return path.read_text() if path.exists() else ""


def _ports() -> dict[str, str]:
    """Each engine identity slot's last bound UDP port (engine/state/identity.py)."""
    return {p.stem: p.read_text() for p in sorted(state_dir().glob("engine-*.port"))}


def _seconds_between(run_dir: Path, alert: str, cause: str) -> float:
    """Between the run's first `alert` and its first transition caused by `cause`, as the
    run's journal timed them (what the engine did, not how long processes took to start)."""
    seen = events(run_dir)
    said = next(e.ts for e in seen if e.kind == "alert" and alert in e.message)
    caused = next(e.ts for e in seen if e.kind == "transition" and e.cause == cause)
    return (caused - said).total_seconds()


def _exit_after_finish(cli: Cli, run_dir: Path) -> float:
    """Seconds between the run's Finished event and its `swjob run` process ending."""
    cli.wait(30)
    ended = datetime.now(UTC)
    return (ended - finished_at(run_dir)).total_seconds()


def test_two_operators_never_touch_each_others_runs(
    tmp_path: Path, clis: Start, record_fault: Callable[..., None]
) -> None:
    """A keeps running while B starts and ends; B's process ends with B (measured), and
    A is neither adopted nor stopped by it."""
    a, a_dir, a_release = _run(clis, tmp_path, "alpha")
    b, b_dir, b_release = _run(clis, tmp_path, "beta")
    b_release.touch()
    exit_s = _exit_after_finish(b, b_dir)
    assert b.proc.returncode == 0, b.output()
    assert exit_s <= EXIT_BOUND_S, f"swjob run lingered {exit_s:.2f} s after its run ended"
    assert "alpha" not in b.output() and a_dir.name not in b.output()
    assert finished(a_dir) is None and pid_alive(agent_pid(a_dir))
    assert ownership.has_live_owner(a_dir.name)
    a_release.touch()
    assert a.wait(30) == 0, a.output()
    assert run_json(a_dir)["state"] == "COMPLETED"
    record_fault(
        "second `swjob run` starts and ends while another runs",
        None,
        f"B exited {exit_s:.2f} s after its run ended; A untouched, COMPLETED",
    )


@pytest.mark.timeout(240)  # the 90 s wait below, the attach's 60 s, the rest
def test_kill_9_then_attach_adopts_under_another_identity_after_pool_rename(
    tmp_path: Path, clis: Start, record_fault: Callable[..., None]
) -> None:
    """A (pool `mine`) is killed -9; B starts and takes A's old engine identity and port,
    so A's node dials B and hears "unknown run": it keeps its job. The pool is renamed
    while A is down; `swjob attach A` (a third identity) re-points the node with the run's
    credential and finishes it — full log, outputs, node torn down — and B carries on. The
    pool's 2 s node deadline is how long A's node waits before it redials."""
    pools = tmp_path / "pools.toml"
    local = 'provider = "local"\nmax_nodes = 2\nnode_lost_after_s = 2\n'
    pools.write_text(f"[pools.mine]\n{local}")
    a, a_dir, a_release = _run(clis, tmp_path, "alpha", "--pool", "mine", "--pools", str(pools))
    node = agent_pid(a_dir)
    a_ports = _ports()
    a.kill9()
    killed = time.monotonic()
    b, b_dir, b_release = _run(clis, tmp_path, "beta")
    try:
        pools.write_text(f"[pools.renamed]\n{local}")
        # B bound A's old identity and port: A's node dials B, which does not drive its run.
        # (A's port was ephemeral: free while A was down, on a busy machine a bind(0) took
        # it about one time in twenty — iroh's DNS queries bind dozens a second — and B
        # bound elsewhere, out of the node's reach. It is now drawn outside that range.)
        # A dial the node began while nobody held the port (B starting slowly on a busy
        # machine) hangs its whole 10 s (agent DIAL_TIMEOUT_S), and a redial waits up to
        # 10 s more (agent/redial.py Backoff's cap): 90 s is room for a few such rounds.
        (log_file,) = (cache_dir() / "nodes").glob(f"local-{a_dir.name}-*/logs/agent.log")
        try:
            eventually(lambda: "unknown run" in log_file.read_text(), 90, "A's node refused by B")
        except AssertionError as missed:  # what the node did, where B is: a miss's witnesses
            said = f"{missed}; engine ports before B {a_ports}, now {_ports()}; A's node's log:\n"
            raise AssertionError(said + log_file.read_text()[-4000:]) from None
        assert pid_alive(node) and finished(a_dir) is None, "an unknown-run reject killed the job"
        assert ownership.has_live_owner(a_dir.name) is False
        a_release.touch()
        attach = clis("attach", a_dir.name, "--pools", str(pools), cwd=tmp_path)
        assert attach.wait(60) == 0, attach.output()
    except BaseException:
        # the nodes outlive their killed operators: their jobs end, the orphans exit
        a_release.touch()
        b_release.touch()
        kill_quietly(node, signal.SIGTERM)
        kill_quietly(agent_pid(b_dir), signal.SIGTERM)
        raise
    adopted_after = time.monotonic() - killed
    assert _log(a_dir).splitlines() == ["line 1", "line 2", "line 3"]
    assert (a_dir / "outputs" / "out.txt").read_text() == "done\n"
    assert run_json(a_dir)["state"] == "COMPLETED"
    assert not pid_alive(node)
    assert finished(b_dir) is None and b.proc.poll() is None, "attach touched B"
    b_release.touch()
    assert b.wait(30) == 0, b.output()
    record_fault(
        "kill -9 of `swjob run`; another operator takes its identity; pool renamed",
        None,
        f"node kept its job; `swjob attach` (new identity) finished it COMPLETED "
        f"{adopted_after:.1f} s after the kill",
    )


def test_a_node_takes_its_operator_as_gone_after_the_pools_node_deadline(
    tmp_path: Path, clis: Start
) -> None:
    """The node's own silence deadline is its pool's `node_lost_after_s` (2 s here, not the
    agent's 10 s default): killed -9, the operator goes quiet and the node says so, and
    starts its orphan clock, as soon as the pool would give the node up."""
    pools = tmp_path / "pools.toml"
    pools.write_text('[pools.local]\nprovider = "local"\nnode_lost_after_s = 2\n')
    cli, run_dir, release = _run(clis, tmp_path, "zeta", "--pools", str(pools))
    node = agent_pid(run_dir)
    (log_file,) = (cache_dir() / "nodes").glob(f"local-{run_dir.name}-*/logs/agent.log")
    cli.kill9()
    try:
        said = "orchestrator silent for 2.0 s: connection lost"
        eventually(lambda: said in log_file.read_text(), 30, "the node noticing the silence")
    finally:
        release.touch()
        kill_quietly(node, signal.SIGTERM)  # the orphan stops its job and exits
    eventually(lambda: not pid_alive(node), 30, "the orphaned agent gone")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_are_an_operator_stop(
    tmp_path: Path, clis: Start, sig: signal.Signals, record_fault: Callable[..., None]
) -> None:
    cli, run_dir, _ = _run(clis, tmp_path, "gamma")
    node = agent_pid(run_dir)
    sent = time.monotonic()
    cli.signal(sig)
    assert cli.wait(30) == 1, cli.output()
    took = time.monotonic() - sent
    summary = run_json(run_dir)
    assert summary["state"] == "FAILED" and summary["reason"] == "stopped by operator"
    assert not pid_alive(node)
    assert not ownership.has_live_owner(run_dir.name)
    record_fault(
        f"{sig.name} to `swjob run`", None, f"stopped, node torn down, exit 1 in {took:.1f} s"
    )


def test_an_adopted_run_whose_node_never_rejoins_fails_within_the_node_deadline(
    tmp_path: Path, clis: Start, record_fault: Callable[..., None]
) -> None:
    """The operator dies and its node hangs (SIGSTOP: alive, never answers): the adopter
    gives up after the node-loss deadline (2 s here, from the user's pools file), FAILED
    "node lost", node torn down."""
    pools = default_pools_file()
    pools.parent.mkdir(parents=True, exist_ok=True)
    pools.write_text(f'[pools.local]\nprovider = "local"\nnode_lost_after_s = {DEADLINE_S}\n')
    cli, run_dir, _ = _run(clis, tmp_path, "delta")
    node = agent_pid(run_dir)
    cli.kill9()
    os.kill(node, signal.SIGSTOP)
    try:
        started = time.monotonic()
        attach = clis("attach", run_dir.name, cwd=tmp_path)
        assert attach.wait(60) == 1, attach.output()
        took = time.monotonic() - started
    finally:
        if pid_alive(node):
            os.kill(node, signal.SIGKILL)
    summary = run_json(run_dir)
    assert summary["state"] == "FAILED"
    assert summary["reason"].startswith(f"node lost: node did not rejoin within {DEADLINE_S} s")
    waited = _seconds_between(run_dir, "recovered after operator restart", "NodeLost")
    assert DEADLINE_S <= waited < DEADLINE_S + 3, f"adopter gave up {waited:.1f} s after adopting"
    eventually(lambda: not pid_alive(node), 30, "the hung agent torn down")
    assert not any((cache_dir() / "nodes").iterdir())
    record_fault(
        "operator kill -9, node hung (SIGSTOP), `swjob attach`",
        took,
        "FAILED node lost; node torn down",
    )


def test_attach_follows_a_live_owner_read_only_then_adopts_when_it_dies(
    tmp_path: Path, clis: Start, record_fault: Callable[..., None]
) -> None:
    """`swjob attach` on a run another live process drives only reads its log; when that
    process is killed, attach takes the run over and finishes it (never 'follows' a run
    that nothing drives)."""
    owner, run_dir, release = _run(clis, tmp_path, "epsilon")
    attach = clis("attach", run_dir.name, cwd=tmp_path)
    eventually(lambda: "driven by another swjob process" in attach.output(), 30, "read-only")
    assert ownership.has_live_owner(run_dir.name) and owner.proc.poll() is None
    owner.kill9()
    killed = time.monotonic()
    eventually(lambda: "recovered after operator restart" in attach.output(), 30, "adopted")
    adopted_s = time.monotonic() - killed
    release.touch()
    assert attach.wait(60) == 0, attach.output()
    assert run_json(run_dir)["state"] == "COMPLETED"
    assert _log(run_dir).splitlines() == ["line 1", "line 2", "line 3"]
    record_fault(
        "owner of a followed run killed -9 while `swjob attach` reads it",
        adopted_s,
        "attach adopted the run and finished it COMPLETED",
    )


def test_two_attaches_at_once_one_adopts_the_other_only_follows(
    tmp_path: Path, clis: Start, record_fault: Callable[..., None]
) -> None:
    """Two `swjob attach` of one orphaned run started together (two engines on one state
    dir): exactly one adopts it; the other follows read-only, and its Ctrl-C ends only
    itself — the run it never drove goes on and the adopter finishes it, each line once.
    Meanwhile `swjob runs`: the killed operator's run is RUNNING in the index with its
    node up and billing, and says nobody drives it and how to take it over; a run driven
    (by its owner, then by the adopter, then ended) says nothing."""
    owner, run_dir, release = _run(clis, tmp_path, "zeta")
    node = agent_pid(run_dir)
    hint = f"nobody drives it: swjob attach {run_dir.name}"
    assert hint not in _listed(run_dir.name)  # positive control: a live owner holds it
    owner.kill9()
    assert hint in _listed(run_dir.name) and "RUNNING" in _listed(run_dir.name)
    first, second = (clis("attach", run_dir.name, cwd=tmp_path) for _ in range(2))
    following = "driven by another swjob process"
    eventually(lambda: any(following in a.output() for a in (first, second)), 30, "read-only")
    follower, adopter = (first, second) if following in first.output() else (second, first)
    eventually(lambda: "recovered after operator restart" in adopter.output(), 30, "adopted")
    follower.signal(signal.SIGINT)
    assert follower.wait(30) == 130, follower.output()
    assert "Traceback" not in follower.output(), follower.output()
    assert finished(run_dir) is None and pid_alive(node), "the follower's Ctrl-C stopped the run"
    assert adopter.proc.poll() is None and ownership.has_live_owner(run_dir.name)
    assert hint not in _listed(run_dir.name)
    release.touch()
    assert adopter.wait(60) == 0, adopter.output()
    assert hint not in _listed(run_dir.name)
    assert run_json(run_dir)["state"] == "COMPLETED"
    assert _log(run_dir).splitlines() == ["line 1", "line 2", "line 3"]
    recovered = [
        e
        for e in events(run_dir)
        if getattr(e, "message", "") == "recovered after operator restart"
    ]
    assert len(recovered) == 1, "the run was adopted twice"
    assert following not in adopter.output()
    assert not pid_alive(node)
    record_fault(
        "owner killed -9; two `swjob attach` of its run at once; Ctrl-C to the follower",
        None,
        "one adopted (COMPLETED, each line once), the other only followed and left alone",
    )


def test_attach_carries_a_run_on_after_its_pool_name_moved_to_another_provider(
    tmp_path: Path, clis: Start, record_fault: Callable[..., None]
) -> None:
    """The run's pool `mine` (local) is redefined as a Vast.ai pool while its operator is
    away: the adopter carries the run on where its node lives — the local node, from the
    pool definition kept with the run — not on the pool the name now means."""
    pools = tmp_path / "pools.toml"
    pools.write_text('[pools.mine]\nprovider = "local"\n')
    a, a_dir, release = _run(clis, tmp_path, "eta", "--pool", "mine", "--pools", str(pools))
    node = agent_pid(a_dir)
    a.kill9()
    pools.write_text(
        '[pools.mine]\nprovider = "vastai"\nimage = "img"\nagent_install = "swjob"\n'
        "[pools.mine.resources]\ngpu_count = 1\n"
    )
    release.touch()
    attach = clis("attach", a_dir.name, "--pools", str(pools), cwd=tmp_path)
    assert attach.wait(60) == 0, attach.output()
    assert "recovered after operator restart" in attach.output()
    assert run_json(a_dir)["state"] == "COMPLETED"
    assert (a_dir / "outputs" / "out.txt").read_text() == "done\n"
    assert not pid_alive(node) and not any((cache_dir() / "nodes").iterdir())
    assert "Vast.ai instance" not in attach.output(), "torn down as if it were a Vast node"
    record_fault(
        "kill -9 of `swjob run`; its local pool's name redefined as a Vast.ai pool; attach",
        None,
        "carried on on the local node (kept pool definition); COMPLETED, node torn down",
    )


def _listed(run_id: str) -> str:
    """`swjob runs` as a terminal shows it: the row of `run_id`."""
    out = io.StringIO()
    print_runs(Console(file=out, force_terminal=True, width=400, color_system=None), limit=10)
    (row,) = [line for line in out.getvalue().splitlines() if run_id in line]
    return row


async def test_attach_adopts_a_run_whose_lease_another_process_held_a_moment(
    tmp_path: Path, clis: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other processes take an ownerless run's lease for a moment: gc's owner check, and
    every index open writing a kept row in (engine/state/spill.py). `attach`, finding the
    lease taken and then free, said the run had ended and exited 1, leaving it unowned."""
    from engine.cli import follow
    from engine.engine import Engine
    from engine.jobs.pools import load_pools

    owner, run_dir, release = _run(clis, tmp_path, "eta")
    owner.kill9()
    adopt = Engine.adopt
    tries: list[str] = []

    async def held_a_moment(self: Engine, run_id: str) -> bool:
        tries.append(run_id)
        if len(tries) == 1:  # another process held its lease while this adopt tried
            return False
        return await adopt(self, run_id)

    monkeypatch.setattr(Engine, "adopt", held_a_moment)
    release.touch()
    monkeypatch.chdir(tmp_path)
    code = await follow.attach(run_dir.name, load_pools(None))
    assert code == 0 and len(tries) >= 2
    assert run_json(run_dir)["state"] == "COMPLETED"
