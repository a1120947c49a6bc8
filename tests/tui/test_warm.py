"""Warm nodes in the console: the pools panel lists a kept node (idle for, expires in) with
the key that releases it, `W` releases it, and quitting asks whether to keep them (the
default: their own timer bounds them) or release them."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot

from engine.engine import Engine
from engine.jobs.jobspec import load_job
from tests.support.engines import engine_config
from tests.tui.conftest import HELLO, SIZE, booted, finished, screen_text, until
from tui.app import SwjobApp
from tui.screens.modals import WarmQuitScreen


def _hello_kept(tmp_path: Path) -> tuple[Engine, SwjobApp]:
    """A console submitting hello on a local pool that keeps its nodes warm."""
    engine = Engine(engine_config(tmp_path / "runs", local={"keep_warm_s": 60}))
    return engine, SwjobApp(engine, jobs=[load_job(HELLO)])


async def _hello_over(pilot: Pilot, app: SwjobApp) -> None:
    await booted(pilot)
    await finished(app, app.engine.runs()[0].run_id)


async def test_the_pools_panel_shows_a_warm_node_and_shift_w_releases_it(tmp_path: Path) -> None:
    engine, app = _hello_kept(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await _hello_over(pilot, app)
        await until(pilot, lambda: "W releases" in screen_text(app))
        assert "expires in" in screen_text(app)
        await pilot.press("W")
        await until(pilot, lambda: engine.warm_nodes() == [])
        await until(pilot, lambda: "W releases" not in screen_text(app))


async def test_quitting_asks_and_keeps_the_warm_nodes_by_default(tmp_path: Path) -> None:
    engine, app = _hello_kept(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await _hello_over(pilot, app)
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, WarmQuitScreen))
        assert "releases itself when its pool's keep_warm_s" in screen_text(app)
        await pilot.press("enter")  # the focused choice: keep them
        await until(pilot, lambda: not app.is_running)
    (kept,) = engine.warm_nodes()  # kept past the console, bounded by its own timer
    assert kept.in_use_by is None
    assert await engine.release_warm() == []
