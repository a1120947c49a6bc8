"""Which runs get a next attempt, and what the caps leave it (pure: views and pools)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engine.jobs.pools import Pool
from engine.report.views import RunView
from engine.run.attempts import (
    Attempt,
    capped,
    first_attempt,
    from_record,
    next_attempt,
    to_record,
)

START = datetime(2026, 12, 3, 6, 0, tzinfo=UTC)


def pool(**caps: float) -> Pool:
    return Pool(name="p", provider="local", max_nodes=1, boot_timeout_s=60,
                node_lost_after_s=10, max_attempts=3, caps=caps)  # fmt: skip


def ended(tmp_path: Path, reason: str, cost: float | None = None, minutes: int = 30) -> RunView:
    (tmp_path / "outputs").mkdir(exist_ok=True)
    return RunView(
        run_id="r1", job_name="j", pool="p", state="FAILED", phase="done", created=START,
        updated=START, finished=START + timedelta(minutes=minutes), reason=reason,
        run_dir=tmp_path, cost_dollars=cost,
    )  # fmt: skip


@pytest.mark.parametrize(
    "reason", ["preempted: Vast.ai stopped interruptible instance 7", "node lost: no heartbeat"]
)
def test_a_node_that_let_the_run_down_gets_a_next_attempt(tmp_path: Path, reason: str) -> None:
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs/ck.txt").write_text("3")
    attempt = next_attempt(ended(tmp_path, reason), pool(), first_attempt("r1", pool()))
    assert attempt is not None
    assert (attempt.number, attempt.of, attempt.first, attempt.previous) == (2, 3, "r1", "r1")
    assert attempt.carried == tmp_path / "outputs"
    assert capped(pool(), attempt).caps == pool().caps


@pytest.mark.parametrize(
    "reason", ["run exited with code 1", "stopped by operator", "cap reached: $3.00"]
)
def test_the_job_or_the_operator_ending_it_is_never_retried(tmp_path: Path, reason: str) -> None:
    assert next_attempt(ended(tmp_path, reason), pool(), first_attempt("r1", pool())) is None


def test_no_attempt_after_the_last_and_nothing_carried_from_empty_outputs(tmp_path: Path) -> None:
    view = ended(tmp_path, "node lost: x")
    assert next_attempt(view, pool(), Attempt(number=3, of=3, first="r0")) is None
    attempt = next_attempt(view, pool(), Attempt(number=2, of=3, first="r0"))
    assert attempt is not None and attempt.carried is None and attempt.first == "r0"


def test_caps_hold_for_the_whole_chain(tmp_path: Path) -> None:
    limited = pool(max_dollars=1.0, max_hours=2.0)
    earlier = Attempt(number=1, of=3, first="r1", spent_dollars=0.25, spent_hours=0.5)
    attempt = next_attempt(ended(tmp_path, "preempted: x", cost=0.35), limited, earlier)
    assert attempt is not None
    assert attempt.spent_dollars == pytest.approx(0.6) and attempt.spent_hours == 1.0
    left = capped(limited, attempt).caps
    assert left.max_dollars == pytest.approx(0.4) and left.max_hours == 1.0
    spent = Attempt(number=1, of=3, first="r1", spent_dollars=0.7)
    assert next_attempt(ended(tmp_path, "preempted: x", cost=0.3), limited, spent) is None
    assert capped(limited, None) is limited


def test_an_attempt_survives_the_recovery_record(tmp_path: Path) -> None:
    attempt = Attempt(number=2, of=3, first="r1", previous="r1", carried=tmp_path, spent_hours=1)
    assert from_record(to_record(attempt)) == attempt
    assert from_record(None) is None and from_record({"number": 2}) is None
