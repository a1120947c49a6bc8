"""The operator is paused, not dead: Ctrl-Z on `swjob run` and `fg` later, a process
stopped (SIGSTOP) or starved past the node-loss deadline.

Its lease stays held (the process lives), so nobody adopts the run meanwhile; when it
runs again, the node's heartbeats it could not read while paused are no evidence that
the node is gone. The run carries on: the node is not torn down under a healthy job.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.standin.server import StandIn
from tests.support.cli import Cli
from tests.support.processes import pid_alive
from tests.support.runs import agent_pid, events, only_run_dir, run_json, waiting_job
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(90)

Start = Callable[..., Cli]
# The deadlines a pause must outlast. After SIGCONT each runs whole again: the first
# bytes moved ~0.5 s after it at load 3, and under a full suite's load 2 s went by with
# none. 4 s is the margin for a loaded machine; each pause outlasts its deadline by 2 s.
PAST_S = 2.0
DEADLINE_S = 4.0
PAUSED_S = DEADLINE_S + PAST_S  # past the node-loss deadline, on both sides
BOOT_TIMEOUT_S = 5.0
# A collection's stall counts the node's silence too: with two suites at once (load ~20)
# a node starved of CPU sent nothing for 4 s of the operator's running time.
STALL_S = 8.0
STALL_PAUSED_S = STALL_S + PAST_S
OUTPUT_BYTES = 64 * 1024 * 1024  # still coming back seconds after the pause ends
ORPHAN_DEADLINE_S = 1.0  # the node's side only: the node is not paused, its operator is


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
    eventually(lambda: not pid_alive(node), 30, "the node torn down at the run's end")
    record_fault(
        f"`swjob run` stopped (SIGSTOP) {PAUSED_S:g} s mid-run, node deadline {DEADLINE_S:g} s",
        None,
        "resumed, the node rejoined, the run COMPLETED",
    )


def test_an_operator_stopped_mid_collection_past_the_stall_deadline_still_collects(
    tmp_path: Path, clis: Start, record_fault: Callable[..., None]
) -> None:
    """Stopped while an output of 64 MiB comes back, for longer than the pool's
    `collect_stall_s`: the bytes the node sent meanwhile sat unread, which is no stall of
    the transfer. The output lands whole and verified."""
    pools = tmp_path / "pools.toml"
    # the pause is past it; after SIGCONT a whole one runs, and under the full suite's
    # load 1 s and 2 s ones were seen to pass before bytes moved again
    pools.write_text(f'[pools.local]\nprovider = "local"\ncollect_stall_s = {STALL_S:g}\n')
    project = tmp_path / "big"
    project.mkdir()
    job = project / "job.toml"
    job.write_text(
        f'[job]\nname = "big"\nrun = "head -c {OUTPUT_BYTES} /dev/urandom > big.bin"\n'
        'workspace = { workdir = "." }\noutputs = ["big.bin"]\n'
    )
    runs = tmp_path / "runs"
    cli = clis("run", str(job), "--runs-dir", str(runs), "--pools", str(pools), cwd=tmp_path)
    eventually(lambda: cli.has_printed("→ CollectOutputs"), 60, "collection started")
    cli.signal(signal.SIGSTOP)
    stopped = datetime.now(UTC)
    try:
        time.sleep(STALL_PAUSED_S)
    finally:
        cli.signal(signal.SIGCONT)
    code = cli.wait(60)
    out = cli.output()
    run_dir = only_run_dir(runs, "big")
    collected = next(e for e in events(run_dir) if getattr(e, "cause", "") == "OutputsCollected")
    assert collected.ts > stopped, "collection was over before the operator was stopped"
    assert code == 0, out
    assert "collection stalled" not in out and "missing outputs" not in out, out
    assert (run_dir / "outputs" / "big.bin").stat().st_size == OUTPUT_BYTES
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [f["verified"] for f in manifest["files"]] == [True], manifest
    record_fault(
        f"`swjob run` stopped (SIGSTOP) {STALL_PAUSED_S:g} s mid-collection, "
        f"collect_stall_s {STALL_S:g}",
        None,
        "resumed, the 64 MiB output landed verified",
    )


def test_an_operator_stopped_past_the_orphan_timeout_says_its_node_gave_up(
    tmp_path: Path, clis: Start, record_fault: Callable[..., None]
) -> None:
    """Stopped past the pool's `orphan_timeout_s` too: the node rightly gave up on its
    operator (job stopped, agent gone), and the run's one line says that — not a bare
    exit code the user has to look up."""
    from agent.node import ExitCode
    from engine.providers.local import ORPHANED

    assert ORPHANED == ExitCode.ORPHANED
    pools = tmp_path / "pools.toml"
    pools.write_text(
        f'[pools.local]\nprovider = "local"\nnode_lost_after_s = {ORPHAN_DEADLINE_S}\n'
        "orphan_timeout_s = 1\n"
    )
    job = waiting_job(tmp_path / "given-up", "given-up", tmp_path / "never")
    runs = tmp_path / "runs"
    cli = clis("run", str(job), "--runs-dir", str(runs), "--pools", str(pools), cwd=tmp_path)
    run_dir = only_run_dir(runs, "given-up")
    eventually(lambda: cli.has_printed("run | line 3"), 30, "the job running")
    node = agent_pid(run_dir)
    cli.signal(signal.SIGSTOP)
    try:
        eventually(lambda: not pid_alive(node), 30, "the orphaned node giving up")
    finally:
        cli.signal(signal.SIGCONT)
    assert cli.wait(30) == 1, cli.output()
    reason = run_json(run_dir)["reason"]
    assert reason == (
        "node lost: agent process exited with code 5 "
        "(orphaned: no operator within the pool's orphan_timeout_s)"
    ), reason
    record_fault(
        "`swjob run` stopped past the pool's orphan timeout",
        None,
        "the node gave up; FAILED, reason says orphaned",
    )


def test_an_operator_stopped_past_the_boot_timeout_still_admits_its_node(
    tmp_path: Path, api: StandIn, clis: Start, record_fault: Callable[..., None]
) -> None:
    """Stopped while its rented node boots, for longer than the pool's `boot_timeout_s`:
    the node came up meanwhile and waited to join, which is no boot timeout. The run
    completes (it was FAILED "boot timeout: node did not join within 5 s")."""
    api.cloud.faults.never_start = True  # the image pull ends when the test says
    pools = tmp_path / "pools.toml"
    pools.write_text(
        '[pools.gpu]\nprovider = "vastai"\nimage = "img"\nagent_install = "swjob==0.1.0"\n'
        f"boot_timeout_s = {BOOT_TIMEOUT_S}\n[pools.gpu.resources]\ngpu_count = 1\n"
    )
    release = tmp_path / "release"
    release.touch()
    job = waiting_job(tmp_path / "booting", "booting", release)
    cli = clis(
        "run", str(job), "--pool", "gpu", "--pools", str(pools),
        "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path,
    )  # fmt: skip
    eventually(lambda: cli.has_printed("image loading"), 30, "the node booting")
    cli.signal(signal.SIGSTOP)
    try:
        (instance,) = api.cloud.instances
        api.cloud.boot(instance)  # the node comes up and dials its stopped operator
        time.sleep(BOOT_TIMEOUT_S + PAST_S)
    finally:
        cli.signal(signal.SIGCONT)
    code = cli.wait(60)
    out = cli.output()
    assert "boot timeout" not in out and code == 0, out
    assert "run | line 3" in out and "COMPLETED" in out, out
    record_fault(
        f"`swjob run` stopped (SIGSTOP) past its boot_timeout_s ({BOOT_TIMEOUT_S:g} s) "
        "while the node booted",
        None,
        "resumed, the node joined, the run COMPLETED",
    )
