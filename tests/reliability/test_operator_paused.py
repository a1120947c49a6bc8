"""The operator is paused, not dead: Ctrl-Z on `swjob run` and `fg` later, a process
stopped (SIGSTOP) or starved past the node-loss deadline.

Its lease stays held (the process lives), so nobody adopts the run meanwhile; when it
runs again, the node's heartbeats it could not read while paused are no evidence that
the node is gone. The run carries on: the node is not torn down under a healthy job.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.processes import pid_alive
from tests.support.runs import agent_pid, only_run_dir, run_json, waiting_job
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(90)

Start = Callable[..., Cli]
DEADLINE_S = 1.0
PAUSED_S = 3.5  # past the node-loss deadline, on both sides, several times over


def test_an_operator_stopped_past_the_node_deadline_carries_its_run_on(
    tmp_path: Path, clis: Start, record_fault: Callable[..., None]
) -> None:
    pools = tmp_path / "pools.toml"
    pools.write_text(f'[pools.local]\nprovider = "local"\nnode_lost_after_s = {DEADLINE_S}\n')
    release = tmp_path / "release"
    job = waiting_job(tmp_path / "paused", "paused", release)
    runs = tmp_path / "runs"
    cli = clis("run", str(job), "--runs-dir", str(runs), "--pools", str(pools), cwd=tmp_path)
    run_dir = only_run_dir(runs, "paused")
    eventually(lambda: cli.has_printed("run | line 3"), 30, "the job running")
    node = agent_pid(run_dir)
    cli.signal(signal.SIGSTOP)  # Ctrl-Z
    try:
        time.sleep(PAUSED_S)
    finally:
        cli.signal(signal.SIGCONT)  # fg
    release.touch()
    code = cli.wait(60)
    out = cli.output()
    assert "node lost" not in out, out
    assert code == 0, out
    assert run_json(run_dir)["state"] == "COMPLETED"
    assert (run_dir / "outputs" / "out.txt").read_text() == "done\n"
    assert (run_dir / "logs" / "run.log").read_text().splitlines() == [
        "line 1", "line 2", "line 3",
    ]  # fmt: skip
    eventually(lambda: not pid_alive(node), 10, "the node torn down at the run's end")
    record_fault(
        f"`swjob run` stopped (SIGSTOP) {PAUSED_S:g} s mid-run, node deadline {DEADLINE_S:g} s",
        None,
        "resumed, the node rejoined, the run COMPLETED",
    )
