"""What `swjob run` / `swjob attach` and `swjob runs` print about a run's money."""

from __future__ import annotations

import io

from rich.console import Console

from engine.cli.render import RunPrinter
from engine.cli.runlist import print_runs
from engine.report import events as ev
from engine.report.runbook import fold
from engine.state.store import Store

RUN = "r1"


def console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=200, color_system=None), out


def transition(phase: str) -> ev.Transition:
    return ev.Transition(
        run_id=RUN,
        cause="x",
        from_state="RUNNING",
        to_state="RUNNING",
        from_phase="new",
        to_phase=phase,
    )


def test_the_end_of_a_rented_run_prints_its_cost_split_by_phase_in_order() -> None:
    con, out = console(terminal=False)
    printer = RunPrinter(con)
    for event in (
        transition("provisioning"),
        transition("run"),
        ev.Cost(run_id=RUN, dollars=0.51, by_phase={"run": 0.5, "provisioning": 0.01}),
        ev.Finished(run_id=RUN, state="COMPLETED", exit_code=0),
    ):
        printer(event)
    assert out.getvalue().splitlines()[-1] == "cost $0.510 (provisioning $0.010 · run $0.500)"


def test_a_local_run_prints_no_cost_line() -> None:
    con, out = console(terminal=False)
    printer = RunPrinter(con)
    printer(ev.Finished(run_id=RUN, state="COMPLETED", exit_code=0))
    assert "cost" not in out.getvalue()


def test_swjob_runs_shows_what_each_run_cost() -> None:
    submitted = ev.Submitted(run_id=RUN, job_name="train", pool="gpu", run_dir="/tmp/r1")
    cost = ev.Cost(run_id=RUN, dollars=1.25, by_phase={"run": 1.25})
    view = fold([submitted, cost])
    assert view is not None
    store = Store()
    try:
        store.save(view)
        assert store.views()[0].cost_by_phase == {"run": 1.25}
    finally:
        store.close()
    con, out = console(terminal=True)
    print_runs(con, limit=10)
    assert "cost" in out.getvalue() and "$1.25" in out.getvalue()


def test_a_teardown_the_provider_could_not_confirm_is_not_printed_as_torn_down() -> None:
    """The run ends either way, but after "may still be billing" warnings a closing
    `NodeTornDown` line would say the opposite; a confirmed teardown keeps its name."""
    for state, said in ((ev.NodeState.UNCONFIRMED, "not confirmed"), (ev.NodeState.GONE, "")):
        con, out = console(terminal=False)
        printer = RunPrinter(con)
        printer(ev.Node(run_id=RUN, provider="vastai", node_id="7001", state=state))
        end = transition("done")
        printer(end.model_copy(update={"cause": "NodeTornDown", "to_state": "FAILED"}))
        last = out.getvalue().splitlines()[-1]
        assert ("NodeTornDown" in last) is not bool(said) and said in last, last
