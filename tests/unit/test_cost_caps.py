"""The cost caps' check at its boundaries: a run stops once its node's life reaches
`max_hours`, or its price × life reaches `max_dollars` — not a second before, and not
at ten times the cap (the real-process test in reliability/test_collection_stop.py sees
only that a cap stops a run at all)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from engine.jobs.pools import Caps
from engine.providers.base import NodeHandle
from engine.run.costmeter import CostMeter, over_cap
from engine.run.runrecord import PhaseClock

HOUR_S = 3600.0


@pytest.mark.parametrize(
    ("alive_s", "reason"),
    [
        (0.0, None),
        (1799.0, None),  # a second short of half an hour
        (1800.0, "cap reached: max_hours 0.5"),
        (1801.0, "cap reached: max_hours 0.5"),
    ],
)
def test_max_hours_is_reached_at_the_nodes_age(alive_s: float, reason: str | None) -> None:
    assert over_cap(Caps(max_hours=0.5), None, alive_s) == reason
    assert over_cap(Caps(max_hours=0.5), 2.0, alive_s) == reason  # priced or not


@pytest.mark.parametrize(
    ("alive_s", "reason"),
    [
        (0.0, None),
        (1799.0, None),  # $0.9994 at $2/h: under the dollar
        (1800.0, "cap reached: max_dollars $1 (spent $1.0000)"),
        (2700.0, "cap reached: max_dollars $1 (spent $1.5000)"),
    ],
)
def test_max_dollars_is_reached_at_price_times_age(alive_s: float, reason: str | None) -> None:
    assert over_cap(Caps(max_dollars=1.0), 2.0, alive_s) == reason


def test_a_node_without_a_price_never_reaches_a_dollar_cap() -> None:
    """The local pool has no price: its dollars are not counted as zero-and-under, nor as
    over; only an hours cap can stop it."""
    assert over_cap(Caps(max_dollars=0.01), None, 100 * HOUR_S) is None
    assert over_cap(Caps(), 2.0, 100 * HOUR_S) is None


def test_the_first_cap_reached_is_the_reason() -> None:
    caps = Caps(max_hours=1.0, max_dollars=1.0)
    assert over_cap(caps, 2.0, 1800.0) == "cap reached: max_dollars $1 (spent $1.0000)"
    assert over_cap(caps, 0.5, HOUR_S) == "cap reached: max_hours 1"


async def test_a_node_replaced_after_its_pre_flight_is_metered_from_its_own_start() -> None:
    """A node that failed pre-flight is destroyed (its end set); the next node's meter
    must not keep that end: it bills while it boots, caps checked, and a destroy before
    it joined (boot timeout, a stop) charges its whole life, not $0."""
    clock = PhaseClock()
    clock.enter("provisioning")
    driver = SimpleNamespace(
        pool=SimpleNamespace(caps=Caps(max_hours=1.0)), clock=clock,
        view=SimpleNamespace(run_id="r"), publish=lambda event: None,
    )  # fmt: skip
    meter = CostMeter(driver)  # type: ignore[arg-type]
    now = time.time()
    meter.start(NodeHandle("vastai", "1", price_per_hour=36.0, created_at=now - 100))
    meter.destroyed(now - 60)  # failed its pre-flight
    meter.start(NodeHandle("vastai", "2", price_per_hour=36.0, created_at=now - 50))
    try:
        assert meter._alive_s() >= 49  # booting: billing, and so under the caps' watch
        meter.destroyed(now)
        assert 49 <= meter._alive_s() <= 51
    finally:
        meter.stop()
