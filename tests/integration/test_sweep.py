"""Sweeps on real agents: the concurrency bound (seen in the datastream), fail-fast, the
sweep-wide dollar cap on a priced pool (the Vast stand-in), and the real `swjob sweep`
with `swjob runs --sweep` and `swjob stop --sweep` from another process."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from engine.api import Engine, Metric, Sweep, expand, load_job, load_sweep
from engine.report import events as ev
from tests.standin.server import StandIn
from tests.support.cli import Cli, swjob
from tests.support.engines import EngineFactory
from tests.support.runs import waiting_job
from tests.support.tap import Tap
from tests.support.vast import gpu_pool
from tests.support.waiting import eventually

SCORE = (
    "python3 -c \"import os, json; json.dump({'loss': float(os.environ['X']) ** 2},"
    " open('m.json', 'w'))\"; test $X != 3"
)


def _most_in_flight(events: list[ev.Event], sweep_id: str) -> int:
    """Replay the stream: the most of the sweep's runs submitted and not yet finished."""
    mine: set[str] = set()
    live = most = 0
    for event in events:
        if isinstance(event, ev.Submitted) and event.sweep == sweep_id:
            mine.add(event.run_id)
            live += 1
        elif isinstance(event, ev.Finished) and event.run_id in mine:
            live -= 1
        most = max(most, live)
    return most


async def test_at_most_n_runs_at_once_each_with_its_values_and_metric(
    engine: Engine, make_job
) -> None:
    job = make_job(run=SCORE, workspace={"workdir": "."}, outputs=["m.json"])
    variants = expand({"X": ["1", "2", "3", "4", "5"]})
    tap = Tap(engine)
    sweep = Sweep(engine, job, variants, concurrency=2, metric=Metric.parse("m.json:loss"))
    rows = await sweep.run()
    tap.close()
    assert _most_in_flight([e for _, e in tap.seen], sweep.sweep_id) == 2
    assert [row.state for row in rows] == ["COMPLETED"] * 2 + ["FAILED"] + ["COMPLETED"] * 2
    assert [row.member.metric for row in rows] == [1.0, 4.0, None, 16.0, 25.0]
    assert rows[2].reason == "run exited with code 1"
    assert {row.view.label for row in rows if row.view} == {f"t[X={i}]" for i in range(1, 6)}
    assert load_sweep(sweep.sweep_id).best() == ("t[X=1]", 1.0)


async def test_fail_fast_stops_the_running_and_starts_no_more(
    engine: Engine, make_job, tmp_path: Path
) -> None:
    never = tmp_path / "never"
    job = make_job(run=f'test "$X" = 3 && exit 7; while [ ! -e {never} ]; do sleep 0.1; done',
                   name="ff")  # fmt: skip
    sweep = Sweep(engine, job, expand({"X": ["1", "3", "5", "6"]}), concurrency=2,
                  fail_fast=True)  # fmt: skip
    rows = await sweep.run()
    assert [row.state for row in rows] == ["FAILED", "FAILED", "NOT STARTED", "NOT STARTED"]
    assert rows[1].view.exit_code == 7
    assert rows[0].reason == "sweep halted: fail-fast: ff[X=3] FAILED"
    assert rows[2].reason == rows[3].reason == "fail-fast: ff[X=3] FAILED"


async def test_the_dollar_cap_stops_running_runs_and_holds_queued_ones(
    api: StandIn, make_engine: EngineFactory, tmp_path: Path
) -> None:
    engine = await make_engine(gpu_pool(node_lost_after_s=10.0))
    job = load_job(waiting_job(tmp_path / "p", "capped", tmp_path / "never"))
    sweep = Sweep(engine, job, expand({"X": ["1", "2", "3"]}), pool="gpu", concurrency=2,
                  max_dollars=0.0001, tick_s=0.1)  # fmt: skip
    rows = await sweep.run()
    assert [row.state for row in rows] == ["FAILED", "FAILED", "NOT STARTED"]
    assert all(row.reason.startswith("sweep halted: sweep cap $0.0001 reached") for row in rows[:2])
    assert rows[2].reason.startswith("sweep cap $0.0001 reached")
    assert sweep.spent() >= 0.0001


def test_the_cli_sweep_its_table_its_runs_and_a_stop_from_another_terminal(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    release = tmp_path / "release"
    job = waiting_job(tmp_path / "p", "cli", release)
    cli = clis("sweep", str(job), "--grid", "X=1,2,3", "--concurrency", "1",
               "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)  # fmt: skip
    eventually(lambda: cli.has_printed("started   cli[X=1]"), 60, "the first run started")
    sweep_id = cli.output().split()[1].rstrip(":")
    listed = swjob("runs", "--sweep", sweep_id[:12], cwd=tmp_path)
    assert listed.returncode == 0 and "cli[X=3]\t\tNOT STARTED" in listed.stdout, listed.stdout
    stopped = swjob("stop", "--sweep", sweep_id, cwd=tmp_path)
    assert stopped.returncode == 0 and "stop asked" in stopped.stdout
    assert cli.wait(60) == 1, cli.output()
    out = cli.output()
    assert "0/3 completed" in out and "halted: stopped by operator (swjob stop --sweep)" in out
    assert f"run them again: swjob sweep --rerun {sweep_id}" in out
    record = json.loads((tmp_path / "swjob-state" / "sweeps" / f"{sweep_id}.json").read_text())
    assert [m["run_id"] is None for m in record["members"]] == [False, True, True]
    release.touch()  # the variants that did not complete, again: now they do
    again = swjob("sweep", "--rerun", sweep_id[:12], "--runs-dir", str(tmp_path / "runs"),
                  cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert "3/3 completed" in again.stdout
