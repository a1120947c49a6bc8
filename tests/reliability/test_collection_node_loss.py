"""A node lost while a *successful* run's outputs come back: the run ends, in bounds,
with the exit code it had. Collecting after exit 0 is a phase with a node to lose: were
it not handled as one, the loss would be ignored and the run would wait for good on a
collection nobody finishes (the stall guard is set past the test's wait here, so only
the node-loss handling can end it). Which outputs did not land and the run's outcome are
pinned with the product's rule for them; here the run must end and keep its exit code.

The agent is frozen (SIGSTOP) as collection begins, so the loss always falls inside it;
then it is killed (its exit is seen at once) or left frozen (the pool's deadline)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

from engine.engine import Engine
from engine.report import events as ev
from tests.support.engines import engine_config
from tests.support.processes import kill_quietly, pid_alive
from tests.support.tap import Tap

pytestmark = [pytest.mark.timeout(90)]

BIG_OUTPUT = "head -c 67108864 /dev/urandom > big.bin"  # 64 MiB: not pulled in a blink
DEADLINE_S = 2.0  # the pool's node_lost_after_s
# the loss is seen within the deadline (at once for a killed agent), then the node is torn
# down (a stop grace of 2 s): 10 s more is the margin for a loaded machine
ENDS_BY_S = DEADLINE_S + 10
# generous for a loaded machine, and still well short of the stall guard: a run that has
# not ended by then waits on a collection that never ends
ENDS_WITHIN_S = 30.0
STALL_S = 600.0


@pytest.mark.parametrize("how", ["killed", "frozen"])
async def test_a_node_lost_during_a_successful_collection_ends_the_run(
    tmp_path, make_job, record_fault, how: str
) -> None:
    job = make_job(run=BIG_OUTPUT, outputs=["big.bin"])
    local = {"node_lost_after_s": DEADLINE_S, "collect_stall_s": STALL_S}
    engine = Engine(engine_config(tmp_path / "runs", local=local))
    await engine.start()
    tap, agent, hung = Tap(engine), 0, False
    try:
        run_id = await engine.submit(job, "local")
        await tap.until(
            lambda e: (
                isinstance(e, ev.Transition) and e.run_id == run_id and e.to_phase == "collecting"
            )
        )
        agent = int(engine.run(run_id).node.offer["pid"])
        os.kill(agent, signal.SIGSTOP)
        lost = time.monotonic()
        if how == "killed":
            os.kill(agent, signal.SIGKILL)
        try:
            view = await asyncio.wait_for(engine.wait(run_id), ENDS_WITHIN_S)
        except TimeoutError:
            hung = True
        ended_s = time.monotonic() - lost
    finally:
        tap.close()
        if agent:
            kill_quietly(agent)  # frozen or killed: it ends here either way
        # a hung run cannot be stopped either (its phase takes no stop): leave it
        await engine.close(stop_running=not hung)
    assert not hung, f"the run did not end within {ENDS_WITHIN_S:g} s of its node being {how}"
    assert ended_s < ENDS_BY_S, f"ended {ended_s:.1f} s after its node was {how}"
    assert view.phase == "done" and view.node.state == "gone", view
    assert not pid_alive(agent)
    record = json.loads((view.run_dir / "run.json").read_text())
    assert record["exit_code"] == 0, record
    landed = view.run_dir / "outputs" / "big.bin"
    assert not landed.exists() or landed.stat().st_size < 64 * 1024 * 1024, (
        "lost after it all landed"
    )
    record_fault(
        f"agent {how} during collection after exit 0 (node deadline {DEADLINE_S:g} s)",
        ended_s,
        f"{view.state} ({view.reason}), exit code 0 kept, node torn down",
        "the outputs not yet pulled",
    )
