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


def test_a_process_giving_way_lowers_its_group_and_each_threads_nice() -> None:
    """Its own session (so its own group), a thread started before it gives way."""
    code = (
        "import threading, time; from agent.priority import give_way; "
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); "
        "give_way(7); print('given', flush=True); time.sleep(30)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "given\n"
        threads = os.listdir(f"/proc/{proc.pid}/task")
        assert len(threads) == 2
        assert all(os.getpriority(os.PRIO_PROCESS, int(t)) == 7 for t in threads)
        if AUTOGROUP:
            assert Path(f"/proc/{proc.pid}/autogroup").read_text().endswith("nice 7\n")
    finally:
        proc.kill()
        proc.wait()
