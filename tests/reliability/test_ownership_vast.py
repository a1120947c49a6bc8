"""Ownership on the Vast.ai stand-in, with real `swjob` processes: gc sees
the node of a run nobody drives (and destroys it, failing the run), never touches a run
with a live owner or another operator's instance; `swjob attach` carries a killed run
on a rented node to its end."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.providers.vast_boot import run_id_of
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.cli import Cli, swjob
from tests.support.processes import reap
from tests.support.runs import finished, only_run_dir, run_json, waiting_job
from tests.support.vast import killed_while_creating
from tests.support.waiting import eventually

Start = Callable[..., Cli]
Rented = tuple[Cli, Path, Path]
POOLS = (
    '[pools.gpu]\nprovider = "vastai"\nimage = "img"\nagent_install = "swjob==0.1.0"\n'
    "max_nodes = 2\n[pools.gpu.resources]\ngpu_count = 1\n"
)


def _instance_of(api: StandIn, run_id: str) -> int:
    (found,) = [i for i, inst in api.cloud.instances.items() if run_id_of(inst.label) == run_id]
    return found


def _rented_runs(start: Start, tmp_path: Path, pools: Path, *names: str) -> list[Rented]:
    """`swjob run` of a waiting job per name on the Vast pool, all started at once (a boot
    takes seconds); returned, as (process, run dir, release file), once every job runs."""
    started = []
    for name in names:
        release = tmp_path / f"release-{name}"
        job = waiting_job(tmp_path / name, name, release)
        cli = start(
            "run", str(job), "--pool", "gpu", "--pools", str(pools),
            "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path,
        )  # fmt: skip
        started.append((cli, name, release))
    rented = []
    for cli, name, release in started:
        run_dir = only_run_dir(tmp_path / "runs", name)
        log = run_dir / "logs" / "run.log"
        eventually(lambda log=log: log.exists() and "line 3" in log.read_text(), 60, name)
        rented.append((cli, run_dir, release))
    return rented


def test_gc_collects_only_abandoned_runs_and_attach_finishes_a_killed_one(
    tmp_path: Path, api: StandIn, clis: Start, record_fault: Callable[..., None]
) -> None:
    """Two runs on rented nodes and another operator's instance, one real `swjob` per step
    (each rented run is a boot and a run: the behaviours below share them):

    - A's operator killed: `swjob gc` lists A's node (never B's, whose owner lives, nor
      the foreign one) and destroys it only on --yes, failing A and charging its life.
    - B's operator killed: `swjob attach` without the Vast API key cannot carry B on; it
      says so in one line naming the run, leaves the node alone and gives the run back.
    - `swjob gc` lists B's node and asks; meanwhile an attach that has the key adopts B.
      The "yes" that follows must not destroy a node a live process now drives: gc skips
      it (and says so), and the attach (the positive control: the lease was given back)
      finishes B COMPLETED with its outputs and its node destroyed."""
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS)
    foreign = api.cloud.create(
        api.cloud.rentable()[0]["id"],
        {"image": "x", "disk": 10, "env": {}, "onstart": None, "label": "swjob:0badc0de:r-x"},
    )
    assert foreign is not None
    (a, a_dir, _), (b, b_dir, b_release) = _rented_runs(clis, tmp_path, pools, "alpha", "beta")
    a_instance, b_instance = _instance_of(api, a_dir.name), _instance_of(api, b_dir.name)
    a.kill9()  # A is abandoned: its instance bills with nobody driving it

    listed = swjob("gc", "--pools", str(pools), cwd=tmp_path, answer="n\n")
    out = listed.stdout
    (a_line,) = [line for line in out.splitlines() if f"instance {a_instance} " in line]
    assert f"run {a_dir.name}" in a_line and "billing for" in a_line and "/h" in a_line
    assert f"`swjob attach {a_dir.name}`" in a_line
    assert b_dir.name not in out, "a run with a live owner was listed"
    assert f"instance {foreign.id} " in out and "0badc0de's, not ours" in out
    assert "nothing destroyed" in out and a_instance in api.cloud.instances

    collected = swjob("gc", "--pools", str(pools), "--yes", cwd=tmp_path)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "collected 1 of 1" in collected.stdout
    assert a_instance not in api.cloud.instances
    assert {b_instance, foreign.id} <= set(api.cloud.instances)
    summary = run_json(a_dir)
    assert summary["state"] == "FAILED" and summary["reason"] == "abandoned: destroyed by gc"
    rows = [e for e in Ledger().entries_of(a_dir.name) if e.created_at is not None]
    [row] = rows  # its node; its cost: its life up to gc's destroy
    assert row.destroyed_at is not None and row.created_at is not None
    billed = row.price_per_hour * (row.destroyed_at - row.created_at) / 3600
    assert summary["cost_dollars"] == pytest.approx(billed, rel=0.02), summary["cost_dollars"]
    assert summary["node"]["state"] == "gone", summary["node"]
    assert finished(b_dir) is None and b.proc.poll() is None

    b.kill9()  # now B's operator dies too
    no_key = {"VAST_API_KEY": ""}
    refused = swjob("attach", b_dir.name, "--pools", str(pools), cwd=tmp_path, env=no_key)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0, said
    (line,) = [ln for ln in said.splitlines() if "cannot be adopted" in ln]
    assert line.startswith(f"error: run {b_dir.name} cannot be adopted: "), said
    assert "VAST_API_KEY" in line and "Traceback" not in said
    assert b_instance in api.cloud.instances and finished(b_dir) is None

    attach = _attach_while_gc_asks(clis, tmp_path, pools, b_dir.name)
    assert b_instance in api.cloud.instances, "gc destroyed an adopted run's node"
    b_release.touch()
    assert attach.wait(90) == 0, attach.output()
    assert run_json(b_dir)["state"] == "COMPLETED"
    assert (b_dir / "outputs" / "out.txt").read_text() == "done\n"
    assert b_instance not in api.cloud.instances
    api.cloud.destroy(foreign.id)
    record_fault(
        "kill -9 of `swjob run` on Vast; `swjob gc` with a live owner, an abandoned run, "
        "another operator's instance",
        None,
        "only the abandoned node destroyed, its run FAILED 'abandoned: destroyed by gc'",
    )
    record_fault(
        "kill -9 of `swjob run` on Vast, then `swjob attach`",
        None,
        "node rejoined the adopter; COMPLETED with outputs; instance destroyed",
    )
    record_fault(
        "`swjob gc` asks; `swjob attach` adopts the listed run; then gc is told yes",
        None,
        "gc skipped the adopted run's node (said so); attach finished it COMPLETED",
    )


def _attach_while_gc_asks(clis: Start, cwd: Path, pools: Path, run_id: str) -> Cli:
    """`swjob gc` lists the node of `run_id` (nobody drives it) and asks; `swjob attach`
    adopts the run before gc is told yes; gc must say it skipped the run and destroy
    nothing. The attach, still driving the run."""
    printed = cwd / "gc.out"
    with printed.open("wb") as out:
        gc = subprocess.Popen(
            [sys.executable, "-m", "engine.cli.main", "gc", "--pools", str(pools)],
            cwd=cwd, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        eventually(lambda: "destroy 1 orphan(s)?" in printed.read_text(), 60, "gc asking")
        assert f"run {run_id}" in printed.read_text()
        attach = clis("attach", run_id, "--pools", str(pools), cwd=cwd)
        eventually(lambda: "recovered after operator restart" in attach.output(), 60, "adopted")
        assert gc.stdin is not None
        gc.stdin.write(b"y\n")
        gc.stdin.close()
        gc.wait(60)
    finally:
        reap(gc)
    said = printed.read_text()
    assert f"run {run_id} was adopted" in said and "collected 0 of 1" in said, said
    return attach


def test_gc_without_an_answer_destroys_nothing_and_says_so(tmp_path: Path, api: StandIn) -> None:
    """`swjob gc` whose stdin ends at its question (a script, `< /dev/null`): a no, in
    one line — not an EOFError traceback."""
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS)
    Ledger().record_intent("run-halfway", "vastai", "swjob:run-halfway", pool="gpu")
    listed = swjob("gc", "--pools", str(pools), cwd=tmp_path, answer="")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "Traceback" not in listed.stderr and listed.stderr == ""
    assert "nothing destroyed" in listed.stdout and "--yes" in listed.stdout
    assert [e.run_id for e in Ledger().open_entries()] == ["run-halfway"]


def test_gc_leaves_the_intent_of_a_create_still_in_flight_for_the_adopter(
    tmp_path: Path, api: StandIn, clis: Start
) -> None:
    """`swjob run` killed while its create call is in flight, then `swjob gc --yes` at
    once: the intent has no instance yet, but Vast answers the create after the kill.
    gc closed that row as gone, so the adopter found no node, failed the run and left
    the instance billing; the row is now left open, and `swjob attach` finds the
    instance through it and ends the run with its node destroyed. The create is held
    until gc has run: with a fixed delay, a loaded machine started gc after Vast had
    answered, and gc rightly destroyed the instance it then found."""
    gate = threading.Event()
    api.cloud.faults.create_gates = [gate]
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS)
    try:
        killed_while_creating(api, clis, tmp_path, pools)
        collected = swjob("gc", "--pools", str(pools), "--yes", cwd=tmp_path)
    finally:
        gate.set()  # Vast answers the create now (and never holds the stand-in past the test)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert len(Ledger().open_entries()) == 1, collected.stdout  # left for the adopter
    eventually(lambda: len(api.cloud.instances) == 1, what="the create answered")
    run_dir = only_run_dir(tmp_path / "swjob-runs", "crashy")
    attach = clis("attach", run_dir.name, "--pools", str(pools), cwd=tmp_path)
    assert attach.wait(90) == 0, attach.output()
    assert api.cloud.instances == {}, "the instance created after the crash was left billing"
    assert run_json(run_dir)["state"] == "COMPLETED"
    assert Ledger().open_entries() == []
