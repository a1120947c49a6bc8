"""Money that survives the operator (issue 12 items 4 and 6), with real `swjob` processes
against the Vast.ai stand-in.

A priced run with a tiny `max_dollars` is killed with -9 mid-job and taken back with
`swjob attach`: the cap still stops it on the node's whole life (not the new process's
share), and run.json shows the true cost — the ledger's created→destroyed time at the
offer's price. The provider's retries and the start-up orphan check reach the user.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.report.datastream import read_events
from engine.state.ledger import Ledger
from tests.standin.server import StandIn

pytestmark = pytest.mark.timeout(120)

PRICE = 0.22  # $/h of offer 103, the cheapest verified 1-GPU offer of the stand-in
CAP_S = 9.0  # the cap in seconds of node life
CAP = PRICE * CAP_S / 3600
POOLS = f"""
[pools.gpu]
provider = "vastai"
image = "img"
agent_install = "swjob"
[pools.gpu.resources]
gpu_count = 1
[pools.gpu.caps]
max_dollars = {CAP!r}
"""


def _swjob(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine.cli.main", *args],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _read_until(cli: subprocess.Popen[str], needle: str) -> list[str]:
    assert cli.stdout is not None
    seen = []
    for line in cli.stdout:
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} never printed:\n{''.join(seen)}")


def test_a_cap_holds_across_kill_9_and_attach_with_the_true_cost(
    tmp_path: Path, api: StandIn
) -> None:
    (tmp_path / "pools.toml").write_text(POOLS)
    (tmp_path / "job.toml").write_text('[job]\nname = "priced"\nrun = "echo started; sleep 300"\n')
    api.cloud.faults.fail_next, api.cloud.faults.fail_paths = 1, "/bundles/"  # one retry
    cli = _swjob("run", "job.toml", "--pool", "gpu", "--pools", "pools.toml", cwd=tmp_path)
    try:
        printed = _read_until(cli, "run | started")
        os.kill(cli.pid, signal.SIGKILL)
    finally:
        cli.kill()
        cli.wait()
        if cli.stdout:
            cli.stdout.close()
    retry = [line for line in printed if "warning: Vast.ai search offers: HTTP 500" in line]
    assert retry, "the provider's retry reached the user"
    time.sleep(2.0)  # the fault: the operator stays away 2 s (the node bills on)
    [run_dir] = (tmp_path / "swjob-runs" / "priced").iterdir()
    attach = _swjob("attach", run_dir.name, "--pools", "pools.toml", cwd=tmp_path)
    out, _ = attach.communicate(timeout=90)
    assert attach.returncode == 1, out
    assert "cap reached: max_dollars" in out
    [row] = Ledger().entries_of(run_dir.name)
    assert row.created_at is not None and row.destroyed_at is not None
    assert row.price_per_hour == PRICE
    stop = next(
        e
        for e in read_events(run_dir / "events.jsonl")
        if getattr(e, "cause", "") == "OperatorStop"
    )
    stopped_after = stop.ts.timestamp() - row.created_at
    print(f"cap of {CAP_S:g} s of node life hit at {stopped_after:.2f} s across kill -9")
    assert CAP_S <= stopped_after <= CAP_S + 1.5, "the cap counted the node's whole life"
    summary = json.loads((run_dir / "run.json").read_text())
    true_cost = PRICE * (row.destroyed_at - row.created_at) / 3600
    assert summary["cost_dollars"] == pytest.approx(true_cost, abs=PRICE * 0.5 / 3600)
    assert sum(summary["cost_by_phase"].values()) == pytest.approx(summary["cost_dollars"])
    assert summary["cost_by_phase"]["run"] > PRICE * 2.0 / 3600  # the time nobody watched
    assert any("search offers: HTTP 500" in alert for alert in summary["alerts"])
    assert api.cloud.instances == {} and Ledger().open_entries() == []


def test_swjob_run_prints_the_start_up_orphan_warning(tmp_path: Path, api: StandIn) -> None:
    """An instance labelled for a run nobody knows bills on the account: the engine-wide
    warning (it has no run id) is printed by `swjob run`, which goes on with its job."""
    api.cloud.faults.never_start = True
    ghost = api.cloud.create(101, {"image": "img", "disk": 10, "env": {}, "onstart": None})
    assert ghost is not None
    ghost.label = "swjob:20250101-000000-deadbeef"
    (tmp_path / "pools.toml").write_text(POOLS)
    (tmp_path / "job.toml").write_text('[job]\nname = "hi"\nrun = "sleep 3; echo hi"\n')
    cli = _swjob("run", "job.toml", "--pools", "pools.toml", cwd=tmp_path)  # the local pool
    out, _ = cli.communicate(timeout=60)
    api.cloud.destroy(ghost.id)
    assert cli.returncode == 0, out
    warned = [line for line in out.splitlines() if line.startswith("warning: orphaned node")]
    assert warned, out
    assert f"instance {ghost.id}" in warned[0] and "swjob gc" in warned[0]
