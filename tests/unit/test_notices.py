"""What of a run's events becomes a notice (engine/watch/notices.py): each thing worth
telling said once — the next attempt, a cap at 80 %, GPUs idle, a node that may still be
billing, the end with its cost, duration and outputs — and nothing for the rest."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from engine.jobs.pools import Caps
from engine.report import events as ev
from engine.report.views import RunView
from engine.watch.notices import Notices

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _view(run_id: str, **changes: object) -> RunView:
    fields = {"job_name": "train", "pool": "gpu", "state": "COMPLETED", "phase": "done"}
    return RunView(
        run_id=run_id, created=T0, updated=T0, run_dir=Path("/runs/train") / run_id,
        **{**fields, **changes},
    )  # fmt: skip


def _notices(views: dict[str, RunView]) -> Notices:
    return Notices(lambda pool: Caps(max_dollars=10.0) if pool == "gpu" else None, views.get)


def test_each_thing_worth_telling_is_said_once() -> None:
    views = {"r2": _view("r2", cost_dollars=8.5, sink="s3://b/train/r2")}
    notices = _notices(views)
    said = []
    for event in [
        ev.Submitted(
            run_id="r2",
            ts=T0,
            job_name="train",
            pool="gpu",
            run_dir="/runs/train/r2",
            attempt=2,
            attempts=3,
            previous_run="r1",
        ),
        ev.Cost(run_id="r2", ts=_at(60), dollars=7.9),
        ev.Cost(run_id="r2", ts=_at(65), dollars=8.1),
        ev.Cost(run_id="r2", ts=_at(70), dollars=8.5),
        ev.Alert(run_id="r2", ts=_at(71), message="GPUs idle: under 5 % for 10 min while run"),
        ev.Alert(run_id="r2", ts=_at(72), message="a live sync failed: disk full"),
        ev.Alert(run_id="r2", ts=_at(73), message="destroy failed; it may still be billing"),
        ev.Finished(run_id="r2", ts=_at(3725), state="COMPLETED", exit_code=0),
        ev.Cost(run_id="r2", ts=_at(3726), dollars=8.6),  # after its end: nobody to tell
    ]:
        said += notices.see(event)
    assert [(n.kind, n.title) for n in said] == [
        ("attempt", "swjob: train: attempt 2 of 3 started"),
        ("cap", "swjob: train: 80% of its max_dollars cap"),
        ("idle", "swjob: train: GPUs idle"),
        ("billing", "swjob: train: a node may still be billing"),
        ("ended", "swjob: train COMPLETED"),
    ]
    assert {n.pool for n in said} == {"gpu"}
    assert said[0].body == "run r2 follows run r1 on pool gpu"
    assert said[1].body == "run r2: $8.10 of $10 spent; it is stopped at the cap"
    assert said[-1].body.splitlines() == [
        "run r2 on pool gpu: COMPLETED",
        "took 1 h 02 min",
        "cost $8.50",
        "outputs: /runs/train/r2/outputs and s3://b/train/r2",
    ]


def test_a_capped_end_says_so_and_an_adopted_run_is_known_by_its_view() -> None:
    views = {"r9": _view("r9", label="train[LR=0.1]")}
    notices = _notices(views)
    reason = "cap reached: max_dollars $10 (spent $10.0012)"
    [ended] = notices.see(ev.Finished(run_id="r9", ts=_at(90), state="STOPPED", reason=reason))
    assert ended.title == f"swjob: train[LR=0.1] stopped: {reason}"
    assert ended.body.splitlines()[:3] == [
        "run r9 on pool gpu: STOPPED",
        f"reason: {reason}",
        "took 1 min 30 s",
    ]
    assert (
        notices.see(ev.Alert(run_id="", message="node x: it may still be billing"))[0].pool is None
    )
    assert notices.see(ev.Log(run_id="zz", step="run", lines=[])) == []  # unknown run
