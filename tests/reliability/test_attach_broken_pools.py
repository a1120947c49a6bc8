"""A run left running (its `swjob run` killed -9), then the user's pools file is broken
by an edit: `swjob attach` must still carry the run on — with the pool the run keeps —
and tear its node down. It used to refuse with the file's syntax error, leaving the node
to run (and a rented one to bill) until the file was mended."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.state.paths import default_pools_file
from tests.support.cli import Cli
from tests.support.processes import pid_alive
from tests.support.runs import agent_pid, only_run_dir, run_json, waiting_job
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(90)


def test_attach_carries_a_run_on_through_a_broken_pools_file(
    tmp_path: Path, clis: Callable[..., Cli], record_fault: Callable[..., None]
) -> None:
    pools = default_pools_file()
    pools.parent.mkdir(parents=True, exist_ok=True)
    pools.write_text('[pools.mine]\nprovider = "local"\n')
    release = tmp_path / "release"
    job = waiting_job(tmp_path / "left", "left", release)
    runs = tmp_path / "runs"
    cli = clis("run", str(job), "--pool", "mine", "--runs-dir", str(runs), cwd=tmp_path)
    run_dir = only_run_dir(runs, "left")
    eventually(lambda: cli.has_printed("run | line 3"), 30, "the job running")
    node = agent_pid(run_dir)
    cli.kill9()
    pools.write_text('[pools.mine\nprovider = "local"\n')  # an edit gone wrong
    release.touch()
    attach = clis("attach", run_dir.name, cwd=tmp_path)
    assert attach.wait(60) == 0, attach.output()
    out = attach.output()
    assert f"warning: {pools}:1: TOML syntax" in out, out
    assert run_json(run_dir)["state"] == "COMPLETED"
    eventually(lambda: not pid_alive(node), 30, "the node torn down")
    record_fault(
        "kill -9 of `swjob run`; pools file then broken; `swjob attach`",
        None,
        "warned about the file, carried the run on with its kept pool: COMPLETED, node down",
    )
