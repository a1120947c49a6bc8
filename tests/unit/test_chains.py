"""History by job: runs grouped into chains of attempts, the latest chain first, the cost
of a chain that of all its attempts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from engine.report.chains import chains
from engine.report.views import RunView

AT = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


def run(
    run_id: str, minute: int, attempt: int = 1, first: str | None = None, cost: float | None = None
) -> RunView:
    return RunView(
        run_id=run_id, job_name="j", pool="p", state="FAILED", phase="done",
        created=AT + timedelta(minutes=minute), updated=AT, run_dir=Path("/r") / run_id,
        attempt=attempt, attempts=3 if first or attempt > 1 else 1, first_run=first,
        cost_dollars=cost,
    )  # fmt: skip


def test_attempts_are_one_entry_under_their_first_run() -> None:
    found = chains(
        [run("c2", 5, 2, "c1", 0.5), run("solo", 3), run("c1", 1, 1, None, 0.25), run("x", 0)]
    )
    assert [[a.run_id for a in c.attempts] for c in found] == [["c1", "c2"], ["solo"], ["x"]]
    assert found[0].latest.run_id == "c2" and found[0].cost_dollars == 0.75
    assert found[1].cost_dollars is None
