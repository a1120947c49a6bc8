"""Spec §6, row by row, plus every event that is not valid in a state."""

from __future__ import annotations

import itertools

import pytest

from engine.run import fsm
from engine.run.fsm import JobState as S
from engine.run.fsm import Phase as P

ALL_EVENTS: list[fsm.Event] = [
    fsm.JobSubmitted(True, True),
    fsm.NodeReady(),
    fsm.WorkspaceMaterialized(),
    fsm.SetupCompleted(),
    fsm.SetupFailed(2),
    fsm.JobExited(0),
    fsm.JobExited(3),
    fsm.OutputsCollected(),
    fsm.NodeFault("disk full"),
    fsm.NodeLost("no heartbeat for 10 s"),
    fsm.NodeGoing("container restarted"),
    fsm.OperatorStop(),
    fsm.NodeTornDown(),
    fsm.QueuedRunAdopted(),
    fsm.InternalError("internal error: OSError: boom"),
]


# Stated here, not read from the product's tables (fsm.ACTIVE, fsm.TABLE): a phase dropped
# from them must fail these tests, not vanish from what they check.
# The phases a run is still going in, with a node to lose: a fault, a loss, a stop or an
# internal error ends each (spec §6). Collecting after exit 0 is one: a node lost then
# must end the run, or it waits for a collection that never ends.
ACTIVE: list[tuple[S, P]] = [
    (S.PENDING, P.PROVISIONING),
    (S.RUNNING, P.MATERIALIZING),
    (S.RUNNING, P.SETUP),
    (S.RUNNING, P.RUN),
    (S.RUNNING, P.COLLECTING),
]
ENDERS = {fsm.NodeFault, fsm.NodeLost, fsm.OperatorStop, fsm.InternalError}
# A container restart (agent/restart.py) ends a run whose step it interrupted; during a
# collection the restarted agent rejoins with the files on its disk and the pull goes on.
GOING = {*ENDERS, fsm.NodeGoing}
# Every (state, phase) a run can be in, and the events that act there (all others are
# ignored). FAILED-collecting is the best-effort collection after a failed run; the
# provider's NodeTornDown is taken wherever teardown may already be under way.
VALID: dict[tuple[S | None, P], set[type]] = {
    (None, P.NEW): {fsm.JobSubmitted},
    (S.PENDING, P.PROVISIONING): {fsm.QueuedRunAdopted, fsm.NodeReady, *GOING},
    (S.RUNNING, P.MATERIALIZING): {fsm.WorkspaceMaterialized, *GOING},
    (S.RUNNING, P.SETUP): {fsm.SetupCompleted, fsm.SetupFailed, *GOING},
    (S.RUNNING, P.RUN): {fsm.JobExited, *GOING},
    (S.RUNNING, P.COLLECTING): {fsm.OutputsCollected, *ENDERS},
    (S.COMPLETED, P.COLLECTING): {fsm.NodeTornDown},
    (S.FAILED, P.COLLECTING): {fsm.OutputsCollected, fsm.NodeTornDown, *ENDERS},
    (S.COMPLETED, P.TEARDOWN): {fsm.NodeTornDown, fsm.InternalError},
    (S.FAILED, P.TEARDOWN): {fsm.NodeTornDown, fsm.InternalError},
    (S.COMPLETED, P.DONE): set(),
    (S.FAILED, P.DONE): set(),
}


def at(state: S | None, phase: P, *, setup: bool = True, workspace: bool = True) -> fsm.FsmState:
    return fsm.FsmState(state=state, phase=phase, has_setup=setup, has_workspace=workspace)


def names(outcome: fsm.Outcome) -> list[str]:
    return [fsm.name(c) for c in outcome.commands]


def test_job_submitted_provisions_a_node() -> None:
    out = fsm.step(fsm.FsmState(), fsm.JobSubmitted(has_setup=False, has_workspace=True))
    assert (out.state.state, out.state.phase) == (S.PENDING, P.PROVISIONING)
    assert names(out) == ["ProvisionNode"]
    assert out.state.has_workspace and not out.state.has_setup


@pytest.mark.parametrize(("setup", "workspace"), itertools.product((True, False), repeat=2))
def test_a_queued_run_adopted_after_its_operator_died_provisions_its_node(
    setup: bool, workspace: bool
) -> None:
    """Still waiting for a slot when its operator died (no node was ever asked for): the
    adopter provisions it, from PENDING as a fresh run would; nothing fails, nothing else."""
    queued = at(S.PENDING, P.PROVISIONING, setup=setup, workspace=workspace)
    out = fsm.step(queued, fsm.QueuedRunAdopted())
    assert not out.ignored and names(out) == ["ProvisionNode"]
    assert out.state == queued  # still PENDING, provisioning; no reason, no exit code
    ready = fsm.step(out.state, fsm.NodeReady())  # and from there the run goes on as ever
    assert ready.state.state is S.RUNNING


def test_node_ready_materializes_the_workspace() -> None:
    out = fsm.step(at(S.PENDING, P.PROVISIONING), fsm.NodeReady())
    assert (out.state.state, out.state.phase) == (S.RUNNING, P.MATERIALIZING)
    assert names(out) == ["MaterializeWorkspace"]


def test_no_workspace_skips_materialization_to_setup() -> None:
    out = fsm.step(at(S.PENDING, P.PROVISIONING, workspace=False), fsm.NodeReady())
    assert (out.state.state, out.state.phase) == (S.RUNNING, P.SETUP)
    assert names(out) == ["RunSetup"]


def test_no_workspace_no_setup_runs_directly() -> None:
    out = fsm.step(at(S.PENDING, P.PROVISIONING, workspace=False, setup=False), fsm.NodeReady())
    assert (out.state.state, out.state.phase) == (S.RUNNING, P.RUN)
    assert names(out) == ["RunJob"]


def test_workspace_materialized_runs_setup() -> None:
    out = fsm.step(at(S.RUNNING, P.MATERIALIZING), fsm.WorkspaceMaterialized())
    assert out.state.phase is P.SETUP and names(out) == ["RunSetup"]


def test_no_setup_goes_straight_to_run_job() -> None:
    out = fsm.step(at(S.RUNNING, P.MATERIALIZING, setup=False), fsm.WorkspaceMaterialized())
    assert out.state.phase is P.RUN and names(out) == ["RunJob"]


def test_setup_completed_runs_the_job() -> None:
    out = fsm.step(at(S.RUNNING, P.SETUP), fsm.SetupCompleted())
    assert out.state.phase is P.RUN and names(out) == ["RunJob"]


def test_failed_setup_is_a_failed_job_and_run_never_starts() -> None:
    out = fsm.step(at(S.RUNNING, P.SETUP), fsm.SetupFailed(7))
    assert out.state.state is S.FAILED and names(out) == ["TeardownNode"]
    assert out.state.reason == "setup failed with code 7"


def test_exit_zero_collects_outputs() -> None:
    out = fsm.step(at(S.RUNNING, P.RUN), fsm.JobExited(0))
    assert (out.state.state, out.state.phase) == (S.RUNNING, P.COLLECTING)
    assert out.commands == (fsm.CollectOutputs(best_effort=False),)
    assert out.state.exit_code == 0


def test_outputs_collected_tears_down_and_completes() -> None:
    out = fsm.step(at(S.RUNNING, P.COLLECTING), fsm.OutputsCollected())
    assert out.state.state is S.COMPLETED and names(out) == ["TeardownNode"]
    assert out.state.reason is None


def test_nonzero_exit_collects_best_effort_then_tears_down_and_fails() -> None:
    out = fsm.step(at(S.RUNNING, P.RUN), fsm.JobExited(3))
    assert out.state.state is S.FAILED
    assert out.commands == (fsm.CollectOutputs(best_effort=True), fsm.TeardownNode())
    assert out.state.exit_code == 3 and out.state.reason == "run exited with code 3"


@pytest.mark.parametrize(
    "event",
    [
        fsm.NodeFault("x"),
        fsm.NodeLost("y"),
        fsm.NodePreempted("z"),
        fsm.OperatorStop(),
        fsm.InternalError("internal"),
    ],
)
@pytest.mark.parametrize(  # stated here, not taken from the table under test
    "source",
    [(S.PENDING, P.PROVISIONING), (S.RUNNING, P.MATERIALIZING), (S.RUNNING, P.SETUP),
     (S.RUNNING, P.RUN)],
)  # fmt: skip
def test_fault_loss_and_stop_tear_down_and_fail(source: tuple[S, P], event: fsm.Event) -> None:
    out = fsm.step(at(*source), event)
    assert out.state.state is S.FAILED and out.state.phase is P.TEARDOWN
    assert names(out) == ["TeardownNode"]


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (fsm.NodeLost("no heartbeat for 12 s"), "node lost: no heartbeat for 12 s"),
        (fsm.NodePreempted("outbid"), "preempted: outbid"),
        (fsm.OperatorStop(), "stopped by operator"),
        (fsm.OperatorStop("cap reached: max_hours 1"), "cap reached: max_hours 1"),
    ],
)
def test_a_stop_or_loss_while_collecting_after_exit_0_tears_down_and_completes(
    event: fsm.Event, reason: str
) -> None:
    """The exit code decided (spec §6): a successful run cut short while its outputs come
    back is COMPLETED; what did not land is recorded with the reason (the driver's part)."""
    collecting = fsm.step(at(S.RUNNING, P.RUN), fsm.JobExited(0)).state
    out = fsm.step(collecting, event)
    assert (out.state.state, out.state.phase) == (S.COMPLETED, P.TEARDOWN)
    assert names(out) == ["TeardownNode"] and out.state.exit_code == 0
    assert fsm.reason_of(event) == reason
    done = fsm.step(out.state, fsm.NodeTornDown()).state
    assert done.finished and done.state is S.COMPLETED


@pytest.mark.parametrize("event", [fsm.NodeFault("transfer failed: x"), fsm.InternalError("x")])
def test_a_failed_collection_after_exit_0_tears_down_and_fails(event: fsm.Event) -> None:
    collecting = fsm.step(at(S.RUNNING, P.RUN), fsm.JobExited(0)).state
    out = fsm.step(collecting, event)
    assert (out.state.state, out.state.phase) == (S.FAILED, P.TEARDOWN)
    assert names(out) == ["TeardownNode"]


def test_reasons_are_one_sanitized_line_per_cause() -> None:
    cases = {
        fsm.NodeLost("no heartbeat for 12 s"): "node lost: no heartbeat for 12 s",
        fsm.NodePreempted("Vast.ai stopped it: outbid"): "preempted: Vast.ai stopped it: outbid",
        fsm.OperatorStop(): "stopped by operator",
        fsm.NodeFault("transfer failed: a.bin"): "transfer failed: a.bin",
    }
    for event, reason in cases.items():
        assert fsm.step(at(S.RUNNING, P.RUN), event).state.reason == reason


@pytest.mark.parametrize("state", [S.COMPLETED, S.FAILED])
def test_teardown_confirmation_ends_every_terminal_state(state: S) -> None:
    out = fsm.step(at(state, P.TEARDOWN), fsm.NodeTornDown())
    assert out.state.finished and out.state.state is state and out.commands == ()


def test_best_effort_collection_end_moves_to_teardown_without_new_commands() -> None:
    failed = fsm.step(at(S.RUNNING, P.RUN), fsm.JobExited(1)).state
    out = fsm.step(failed, fsm.OutputsCollected())
    assert out.state.phase is P.TEARDOWN and out.commands == ()
    assert out.state.reason == "run exited with code 1"


@pytest.mark.parametrize(
    "event", [fsm.OperatorStop("cap reached: max_hours 1"), fsm.InternalError("x")]
)
def test_stop_or_internal_error_cuts_best_effort_collection_keeping_the_verdict(
    event: fsm.Event,
) -> None:
    """After a failed run the node is still up while outputs are gathered: a stop (operator,
    cap) or a collection that raised orders the teardown; the exit code's reason stays."""
    failed = fsm.step(at(S.RUNNING, P.RUN), fsm.JobExited(1)).state
    out = fsm.step(failed, event)
    assert (out.state.state, out.state.phase) == (S.FAILED, P.TEARDOWN)
    assert names(out) == ["TeardownNode"]
    assert out.state.reason == "run exited with code 1"


@pytest.mark.parametrize("state", [S.COMPLETED, S.FAILED])
def test_teardown_that_broke_ends_the_run_without_another_teardown(state: S) -> None:
    """The teardown's own failure is an alert; its InternalError ends the run, never loops."""
    out = fsm.step(at(state, P.TEARDOWN), fsm.InternalError("internal error: x"))
    assert out.state.finished and out.state.state is state and out.commands == ()


def test_internal_error_reason_is_the_event_line() -> None:
    out = fsm.step(at(S.RUNNING, P.MATERIALIZING), fsm.InternalError("internal error: E: x"))
    assert out.state.reason == "internal error: E: x"


@pytest.mark.parametrize("phase", [P.SETUP, P.RUN])
def test_a_node_going_with_its_agent_answering_is_collected_then_torn_down(phase: P) -> None:
    out = fsm.step(at(S.RUNNING, phase), fsm.NodeGoing("container restarted: run interrupted"))
    assert names(out) == ["CollectOutputs", "TeardownNode"]
    assert out.commands[0] == fsm.CollectOutputs(best_effort=True)
    assert (out.state.state, out.state.phase) == (S.FAILED, P.COLLECTING)
    assert out.state.reason == "container restarted: run interrupted"


@pytest.mark.parametrize("source", [(S.PENDING, P.PROVISIONING), (S.RUNNING, P.MATERIALIZING)])
def test_a_node_going_before_any_step_is_torn_down(source: tuple[S, P]) -> None:
    out = fsm.step(at(*source), fsm.NodeGoing("container restarted"))
    assert names(out) == ["TeardownNode"] and out.state.state is S.FAILED


def test_first_failure_reason_wins() -> None:
    failed = fsm.step(at(S.RUNNING, P.RUN), fsm.JobExited(1)).state
    out = fsm.step(failed, fsm.NodeLost("gone"))
    assert out.state.reason == "run exited with code 1"


def test_every_terminal_path_orders_teardown() -> None:
    """Walk all event sequences of length ≤ 6: any path reaching a terminal state emitted
    TeardownNode, and a finished run never emits another command."""
    start = fsm.step(fsm.FsmState(), fsm.JobSubmitted(True, True)).state
    for path in itertools.product(ALL_EVENTS[1:], repeat=4):
        state, emitted = start, []
        for event in path:
            out = fsm.step(state, event)
            if state.finished:
                assert out.ignored
            state = out.state
            emitted += names(out)
        if state.state is not None and state.state.terminal:
            assert "TeardownNode" in emitted


def _all_states() -> list[fsm.FsmState]:
    return [
        at(state, phase, setup=setup, workspace=ws)
        for (state, phase) in VALID
        for setup in (True, False)
        for ws in (True, False)
    ]


@pytest.mark.parametrize("state", _all_states(), ids=lambda s: f"{s.state}-{s.phase}")
def test_valid_events_act_and_the_rest_are_ignored_never_raised(state: fsm.FsmState) -> None:
    valid = VALID[(state.state, state.phase)]
    for event in ALL_EVENTS:
        out = fsm.step(state, event)
        if isinstance(event, tuple(valid)):
            assert not out.ignored, (state, event)
        else:
            assert out.ignored and out.state == state and out.commands == (), (state, event)


def test_step_is_pure() -> None:
    state = at(S.RUNNING, P.RUN)
    assert fsm.step(state, fsm.JobExited(3)) == fsm.step(state, fsm.JobExited(3))
    assert state == at(S.RUNNING, P.RUN)


def test_every_state_in_the_product_table_is_stated_here() -> None:
    """A state the lifecycle table gains is one these tests must be told about."""
    assert {row.source for row in fsm.TABLE} <= set(VALID)
