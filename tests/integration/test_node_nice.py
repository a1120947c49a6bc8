"""A local node gives way to its operator (agent/priority.py): its agent and its steps,
each a session and so a CPU group of its own, run with the pool's `node_nice` as their
group's nice and their own, so a dozen busy nodes do not take the console's core. Where
the kernel groups no sessions (no /proc/self/autogroup: macOS, autogroup off) only the
processes' nice is there to see."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from agent.priority import give_way
from tests.support.runs import run_to_end

AUTOGROUP = Path("/proc/self/autogroup").exists()

SHOW = (
    "echo agent $(cat /proc/$PPID/autogroup 2>/dev/null || echo none); "
    "echo step $(cat /proc/self/autogroup 2>/dev/null || echo none); echo nice $(nice)"
)


async def test_a_local_nodes_agent_and_steps_give_way(make_engine, make_job) -> None:
    engine = await make_engine(local={"node_nice": 10})
    view = await run_to_end(engine, make_job(run=SHOW, workspace={"workdir": "."}))
    assert view.state == "COMPLETED", view.reason
    log = (view.run_dir / "logs" / "run.log").read_text()
    lines = log.splitlines()
    assert "nice 10" in lines, log
    if AUTOGROUP:  # the agent's group and the step's own, each at the pool's nice
        agent, step = (line for line in lines if line.startswith(("agent", "step")))
        assert agent.endswith("nice 10") and step.endswith("nice 10"), log
        assert agent.split()[1] != step.split()[1], "the step leads a session: a group of its own"


def test_giving_way_lowers_a_session_leaders_group_and_nice() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    try:
        give_way(7, proc.pid)
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == 7
        if AUTOGROUP:
            assert Path(f"/proc/{proc.pid}/autogroup").read_text().endswith("nice 7\n")
        give_way(0, proc.pid)  # 0: left as it is
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == 7
    finally:
        proc.kill()
        proc.wait()
