"""Fall-over while provisioning (engine/run/fallover.py): which pool a run moves to when its
pool had nothing left, what is on record (events, recovery facts, the view's pool), and the
one-line reason when no pool is left. The real pools and reducer; the driver is its shape."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

from rich.console import Console

from engine.jobs.pools import Pool, PoolSet
from engine.report import events as ev
from engine.report.runbook import apply, new_view
from engine.run.fallover import LEFT, PASSED, PoolSource, fall_over
from tui.widgets.timeline import render_timeline

POOLS = {
    "vast": Pool(
        name="vast", provider="vastai", image="img", fallback=("gone", "pod", "cpu")
    ),  # `gone`: since removed
    "pod": Pool(name="pod", provider="runpod", image="img", node_lost_after_s=20.0),
    "cpu": Pool(name="cpu", provider="local"),
}


class _Driver:
    """What fall_over needs of a run's driver."""

    def __init__(self, job: Any, pool: str = "vast") -> None:
        self.job = job
        self.pool = POOLS[pool]
        self.view = new_view(ev.Submitted(run_id="r", job_name="j", pool=pool, run_dir="/r"))
        self.recovery: dict[str, Any] = {}
        self.seated: list[tuple[str, str, float]] = []
        self.pools = PoolSource(self._ready, heartbeat_s=5.0)

    async def _ready(self, name: str) -> tuple[Pool, Any]:
        return PoolSet(POOLS).get(name), f"provider of {name}"  # unknown: as the engine says

    def publish(self, event: ev.Event) -> None:
        self.view = apply(self.view, event)

    def remember(self, **facts: Any) -> None:
        self.recovery.update(facts)

    def redact(self, text: str) -> str:
        return text

    def seat(self, pool: Pool, provider: Any, heartbeat_s: float) -> None:
        self.pool = pool
        self.seated.append((pool.name, provider, heartbeat_s))


async def test_the_run_moves_to_the_next_pool_that_can_take_it(make_job) -> None:
    driver = _Driver(make_job(run="true"))
    assert await fall_over(driver, "3 offers rented away") is None
    assert driver.seated == [("pod", "provider of pod", 5.0)]
    assert driver.view.pool == "pod"
    assert driver.view.pools_passed == [
        {"pool": "vast", "reason": "3 offers rented away"},
        {"pool": "gone", "reason": "unknown pool 'gone' (known: vast, pod, cpu)"},
    ]
    assert driver.recovery[LEFT] == ["cpu"] and driver.recovery["pool"] == "pod"
    assert Pool.model_validate_json(driver.recovery["pool_def"]) == POOLS["pod"]
    [said] = driver.view.all_alerts
    assert said.startswith("pool 'vast' had nothing for the run (3 offers rented away); ")
    assert said.endswith(": moving to pool 'pod'")
    # the next pool had nothing either: on to the last, the first's list still counting
    assert await fall_over(driver, "no capacity") is None
    assert driver.view.pool == "cpu" and driver.recovery[LEFT] == []
    assert [p["pool"] for p in driver.recovery[PASSED]] == ["vast", "gone", "pod"]


async def test_no_pool_left_fails_the_run_naming_each_pools_reason(make_job) -> None:
    driver = _Driver(make_job(run="true"))
    driver.recovery[LEFT] = []  # as an adopter finds it: every pool tried before
    driver.recovery[PASSED] = [{"pool": "pod", "reason": "no capacity"}]
    said = await fall_over(driver, "no offer under max_price_per_hour")
    assert said == (
        "no pool could serve the run: pool 'pod': no capacity; "
        "pool 'vast': no offer under max_price_per_hour"
    )
    assert driver.seated == [] and driver.view.pool == "vast"
    alone = _Driver(make_job(run="true"), pool="pod")  # no fallback at all
    assert await fall_over(alone, "no capacity") == "provisioning failed: no capacity"


def test_the_job_detail_timeline_names_each_pool_passed_and_its_reason() -> None:
    run = new_view(ev.Submitted(run_id="r", job_name="j", pool="vast", run_dir="/r"))
    provisioning = ev.Transition(
        run_id="r", cause="JobSubmitted", from_state=None, to_state="PENDING",
        from_phase="new", to_phase="provisioning", commands=["ProvisionNode"],
    )  # fmt: skip
    why = "Vast.ai: the 3 best offers for pool 'vast' were all rented away"
    for event in (
        provisioning,
        ev.PoolPassed(run_id="r", pool="vast", reason=why, next_pool="pod"),
    ):
        run = apply(run, event)
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(render_timeline(run, datetime.now(UTC)))
    text = console.export_text()
    assert "pool vast passed" in text and "were all rented away" in text
