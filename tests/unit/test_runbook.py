"""The reducer that turns a run's datastream into the RunView every console shows."""

from __future__ import annotations

from engine.report import events as ev
from engine.report.runbook import apply, fold

RUN = "r1"


def submitted() -> ev.Submitted:
    return ev.Submitted(run_id=RUN, job_name="train", pool="local", run_dir="/tmp/r1")


def test_a_log_that_does_not_start_with_submitted_has_no_view() -> None:
    assert fold([]) is None
    assert fold([ev.Cost(run_id=RUN, dollars=1.0)]) is None


def test_cost_events_carry_the_total_and_the_split_by_phase_into_the_view() -> None:
    first = ev.Cost(run_id=RUN, dollars=0.01, by_phase={"provisioning": 0.01})
    later = ev.Cost(run_id=RUN, dollars=0.51, by_phase={"provisioning": 0.01, "run": 0.5})
    view = fold([submitted(), first, later])
    assert view is not None
    assert view.cost_dollars == 0.51
    assert view.cost_by_phase == {"provisioning": 0.01, "run": 0.5}


def test_transitions_build_the_timeline_and_finished_ends_the_run() -> None:
    step = ev.Transition(
        run_id=RUN,
        cause="Provisioned",
        from_state="PENDING",
        to_state="RUNNING",
        from_phase="new",
        to_phase="provisioning",
    )
    done = ev.Finished(run_id=RUN, state="FAILED", exit_code=3, missing_outputs=["out/"])
    view = fold([submitted(), step, done])
    assert view is not None
    assert [t.to_phase for t in view.timeline] == ["provisioning"]
    assert (view.state, view.exit_code, view.missing_outputs) == ("FAILED", 3, ["out/"])
    assert view.terminal and view.finished == done.ts


def test_only_persistent_alerts_stay_on_the_view() -> None:
    view = fold([submitted()])
    assert view is not None
    view = apply(view, ev.Alert(run_id=RUN, message="retrying"))
    view = apply(view, ev.Alert(run_id=RUN, message="instance 9 may bill", persistent=True))
    assert view.alerts == ["instance 9 may bill"]


def test_transfer_progress_is_kept_per_direction() -> None:
    def progress(direction: ev.TransferDirection, done: int) -> ev.TransferProgress:
        return ev.TransferProgress(
            run_id=RUN,
            direction=direction,
            bytes_done=done,
            bytes_total=10,
            files_done=0,
            files_total=1,
        )

    events = [submitted(), progress(ev.TransferDirection.PUSH, 4)]
    events += [progress(ev.TransferDirection.PULL, 2), progress(ev.TransferDirection.PUSH, 10)]
    view = fold(events)
    assert view is not None
    assert {d: t.bytes_done for d, t in view.transfers.items()} == {"push": 10, "pull": 2}
