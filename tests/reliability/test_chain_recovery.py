"""An operator crash between two attempts of a chain, with real `swjob` processes:
`swjob attach` on attempt 1 picks the chain up and follows attempt 2, started once and
carrying the synced checkpoint, to COMPLETED.

- Vast.ai stand-in: `swjob run --attempts 2` is killed -9 while attempt 1, preempted, is
  being torn down (the stand-in holds its destroy): its verdict known, attempt 2 not yet
  recorded. Attach finishes the teardown, and attempt 1's end records attempt 2.
- Local pool: the engine is killed -9 after attempt 1 ended and recorded attempt 2 — before
  attempt 2 was started (frozen in the one await between the two), or once it was started
  and indexed but before its FSM began. Attach (or an engine adopting as the console does)
  runs the recorded attempt under its recorded run id, once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.jobs.pools import load_pools
from engine.state.paths import default_pools_file
from engine.state.store import Store
from tests.standin.server import StandIn
from tests.support.cli import Cli
from tests.support.jobs import RESUMING
from tests.support.processes import reap
from tests.support.recovery import ENGINE_MAIN, recover
from tests.support.runs import agent_pid, events, finished, only_run_dir, run_json
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(150)

Start = Callable[..., Cli]
POOLS = (
    '[pools.spot]\nprovider = "vastai"\nimage = "img"\nagent_install = "swjob==0.1.0"\n'
    "max_nodes = 2\ninterruptible = true\nbid_fraction = 0.5\nnode_lost_after_s = 2\n"
    "[pools.spot.resources]\ngpu_count = 1\n"
)


def _chain_job(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    job = project / "job.toml"
    job.write_text(
        f'[job]\nname = "chain"\nrun = \'{RESUMING}\'\noutputs = ["ck/", "result.txt"]\n'
    )
    return job


def _destroy_asked(api: StandIn, instance: int) -> bool:
    return any(m == "DELETE" and str(instance) in p for m, p, _, _ in list(api.requests))


def test_kill_9_between_attempts_then_attach_finishes_the_chain_once(
    tmp_path: Path, api: StandIn, clis: Start, record_fault: Callable[..., None]
) -> None:
    pools, runs = tmp_path / "pools.toml", tmp_path / "runs"
    pools.write_text(POOLS)
    cli = clis(
        "run", str(_chain_job(tmp_path)), "--pool", "spot", "--pools", str(pools),
        "--attempts", "2", "--sync-every", "0.3", "--runs-dir", str(runs), cwd=tmp_path,
    )  # fmt: skip
    first = only_run_dir(runs, "chain")
    checkpoint = first / "outputs/ck/last.txt"
    eventually(checkpoint.exists, 90, "a live sync landed the checkpoint")
    [instance] = api.cloud.instances
    api.cloud.faults.destroy_never = True  # holds attempt 1's teardown: the window stays open
    api.cloud.preempt(instance)
    eventually(lambda: _destroy_asked(api, instance), 30, "attempt 1's node being destroyed")
    cli.kill9()
    killed_at = time.monotonic()
    verdicts = [e for e in events(first) if e.kind == "transition" and e.to_state == "FAILED"]
    assert verdicts and verdicts[0].reason.startswith("preempted"), events(first)
    assert finished(first) is None, "attempt 1 ended before the kill: the window was missed"
    assert list((runs / "chain").iterdir()) == [first], "attempt 2 began before the kill"

    api.cloud.faults.destroy_never = False
    attach = clis("attach", first.name, "--pools", str(pools), cwd=tmp_path)
    assert attach.wait(120) == 0, attach.output()
    took = time.monotonic() - killed_at
    [second] = [d for d in (runs / "chain").iterdir() if d != first]
    done, lost = run_json(second), run_json(first)
    assert lost["state"] == "FAILED" and lost["reason"].startswith("preempted")
    assert done["state"] == "COMPLETED", attach.output()
    assert done["attempt"] == {"number": 2, "of": 2, "first": first.name, "previous": first.name}
    assert (second / "outputs/result.txt").read_text() == "resumed from epoch-3\n"
    assert "attempt 2/2" in attach.output()
    assert api.cloud.instances == {} and len(api.cloud.destroyed) == 2
    record_fault(
        "kill -9 of `swjob run --attempts 2` while preempted attempt 1 is torn down; attach",
        None,
        f"attach finished the teardown and ran attempt 2 once from the synced checkpoint: "
        f"COMPLETED {took:.1f} s after the kill",
    )


FREEZES = {
    # the one await between "attempt 1 ended, attempt 2 recorded" and "attempt 2 starts"
    "recorded": """
import asyncio
from engine.run.livehub import LiveHub

async def run_ended(self, run_id):
    print("FROZEN", flush=True)
    await asyncio.Event().wait()  # the operator dies here

LiveHub.run_ended = run_ended
""",
    # attempt 2 started and indexed, its FSM not begun: nothing asked of the provider yet
    "indexed": """
import asyncio
from engine.run.orchestrator import RunDriver
real_run = RunDriver.run

async def run(self):
    if self.attempt is not None and self.attempt.number == 2:
        print("FROZEN", flush=True)
        await asyncio.Event().wait()  # the operator dies here
    return await real_run(self)

RunDriver.run = run
""",
}
LOCAL_CHAIN = (
    '[pools.local]\nprovider = "local"\nnode_lost_after_s = 2\nsync_every_s = 0.3\n'
    "max_attempts = 2\n"
)


def _killed_between_attempts(tmp_path: Path, freeze: str) -> tuple[Path, Path, float]:
    """An engine (local pool, 2 attempts) killed -9 at `freeze` after attempt 1's node was
    lost: (runs dir, attempt 1's run dir, when it was killed)."""
    runs = tmp_path / "runs"
    default_pools_file().parent.mkdir(parents=True, exist_ok=True)
    default_pools_file().write_text(LOCAL_CHAIN)  # the pools every process here reads
    engine = subprocess.Popen(
        [sys.executable, "-c", FREEZES[freeze] + ENGINE_MAIN, str(_chain_job(tmp_path)),
         str(runs)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        first = only_run_dir(runs, "chain")
        eventually((first / "outputs/ck/last.txt").exists, 60, "a live sync landed the checkpoint")
        os.kill(agent_pid(first), signal.SIGKILL)  # attempt 1's node is lost
        assert engine.stdout is not None
        assert "FROZEN" in engine.stdout.readline()
        os.kill(engine.pid, signal.SIGKILL)
        killed_at = time.monotonic()
    finally:
        reap(engine)
    assert finished(first) is not None
    second = Store().next_run(first.name)
    assert second is not None, "attempt 1 ended without recording attempt 2"
    begun = {d.name: [e.kind for e in events(d)] for d in (runs / "chain").iterdir() if d != first}
    assert begun == ({} if freeze == "recorded" else {second: ["submitted"]})
    return runs, first, killed_at


def _second_attempt(runs: Path, first: Path) -> Path:
    """The one other run of the job (a second one would be attempt 2 run twice)."""
    [second] = [d for d in (runs / "chain").iterdir() if d != first]
    done = run_json(second)
    assert run_json(first)["reason"].startswith("node lost")
    assert done["attempt"] == {"number": 2, "of": 2, "first": first.name, "previous": first.name}
    assert (second / "outputs/result.txt").read_text() == "resumed from epoch-3\n"
    return second


@pytest.mark.parametrize("freeze", ["recorded", "indexed"])
def test_kill_9_between_attempts_after_the_next_was_recorded_then_attach_runs_it_once(
    tmp_path: Path, clis: Start, record_fault: Callable[..., None], freeze: str
) -> None:
    runs, first, killed_at = _killed_between_attempts(tmp_path, freeze)
    attach = clis("attach", first.name, cwd=tmp_path)
    assert attach.wait(60) == 0, attach.output()
    took = time.monotonic() - killed_at
    assert run_json(_second_attempt(runs, first))["state"] == "COMPLETED", attach.output()
    again = clis("attach", first.name, cwd=tmp_path)
    assert again.wait(60) == 0, again.output()
    assert len(list((runs / "chain").iterdir())) == 2, "a replay started attempt 2 again"
    where = {"recorded": "before it started", "indexed": "started, before it began"}[freeze]
    record_fault(
        f"kill -9 after attempt 1 ended and recorded attempt 2, {where}; attach",
        None,
        f"attach ran the recorded attempt 2 from the synced checkpoint: COMPLETED "
        f"{took:.1f} s after the kill; a second attach started nothing",
    )


async def test_the_console_starts_a_recorded_attempt_its_recorder_died_before_starting(
    tmp_path: Path,
) -> None:
    runs, first, _ = _killed_between_attempts(tmp_path, "recorded")
    second = Store().next_run(first.name)
    assert second is not None
    view = await recover(runs, load_pools(None), second)  # an engine adopting as the console does
    assert view.state == "COMPLETED", view.reason
    assert _second_attempt(runs, first).name == second
