"""The console's live-node keys and views: GPU telemetry on the board and in the detail,
`p` forwards a port (listed in the detail), `!` opens a shell. A real engine and real
agents; the GPU is a fake nvidia-smi replaying recorded frames (tests/support/fake_gpu.py).
The shell itself needs a real terminal: tests/smoke covers it; here, headless, `!` must say
it cannot suspend rather than fail."""

from __future__ import annotations

import asyncio

import pytest
from textual.pilot import Pilot

from agent.gpu import parse
from engine.engine import Engine
from engine.report.events import GpuMetrics
from engine.state.store import Store
from tests.support import fake_gpu
from tests.support.http import free_port, served
from tests.tui.conftest import SIZE, booted, screen_text, toasts, until
from tests.tui.test_snapshots import app_on, recorded  # noqa: F401  (a fixture)
from tui import history
from tui.app import SwjobApp
from tui.live import ForwardScreen, parse_ports
from tui.screens.detail import DetailScreen
from tui.widgets.gpu_panel import TICKS, GpuPanel
from tui.widgets.jobs_table import JobsTable

HTTP_RUN = "echo served > page.txt; exec python3 -m http.server {port} --bind 127.0.0.1"


def step_cell(app: SwjobApp, run_id: str) -> str:
    return str(app.screen.query_one(JobsTable).get_cell(run_id, "step"))


async def test_gpu_sparkline_on_the_board_and_bars_in_the_detail(
    engine, make_job, tmp_path, monkeypatch
) -> None:
    fake_gpu.install("busy-2gpu.txt", tmp_path / "gpu-bin", monkeypatch)
    app = SwjobApp(engine, jobs=[make_job(name="gpu", run="sleep 300")])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        await until(pilot, lambda: any(t in step_cell(app, run_id) for t in TICKS))
        assert step_cell(app, run_id).startswith("run ")
        gpu = app.screen.query_one("#gpu")  # the board's preview: its GPU corner
        await until(pilot, lambda: any(t in str(gpu.render()) for t in TICKS))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        await until(pilot, lambda: app.screen.query_one(GpuPanel).display)
        text = screen_text(app)
        assert "GPU0" in text and "GPU1" in text and "/24.0 GB" in text
        await engine.stop(run_id)


async def test_p_forwards_a_port_listed_in_the_detail_and_the_preview(engine, make_job) -> None:
    port = free_port()
    app = SwjobApp(engine, jobs=[make_job(name="web", run=HTTP_RUN.format(port=port))])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        await until(pilot, lambda: (v := engine.run(run_id)) is not None and v.phase == "run")
        await pilot.press("enter", "p")
        await until(pilot, lambda: isinstance(app.screen, ForwardScreen))
        await pilot.press(*"70000", "enter")  # refused inline, the modal stays
        await until(pilot, lambda: "ports are 1-65535" in screen_text(app))
        await pilot.press(*["backspace"] * 5, *str(port), "enter")
        await until(pilot, lambda: engine.live.forwards(run_id) != [])
        local = engine.live.forwards(run_id)[0].local_port
        await until(pilot, lambda: f"⇄ 127.0.0.1:{local} → node port {port}" in screen_text(app))
        assert any(f"127.0.0.1:{local}" in t for t in toasts(app))
        body = await served(local, "page.txt")
        assert body == "served\n"
        await until(pilot, lambda: "1 served" in screen_text(app) or "2 served" in screen_text(app))
        await pilot.press("escape")  # the board's preview lists it too
        await until(pilot, lambda: f"⇄ 127.0.0.1:{local} → node port {port}" in screen_text(app))
        await engine.stop(run_id)
        await asyncio.wait_for(engine.wait(run_id), 30)
        assert engine.live.forwards(run_id) == []


async def test_bang_says_when_the_console_cannot_step_aside(engine, make_job) -> None:
    app = SwjobApp(engine, jobs=[make_job(name="sh", run="sleep 300")])
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        run_id = engine.runs()[0].run_id
        await until(pilot, lambda: (v := engine.run(run_id)) is not None and v.phase == "run")
        await pilot.press("exclamation_mark")
        await until(pilot, lambda: any("Cannot suspend" in t for t in toasts(app)))
        await engine.stop(run_id)


def test_parse_ports() -> None:
    assert parse_ports("6006") == (6006, 0)
    assert parse_ports(" 8888 9000 ") == (8888, 9000)
    assert parse_ports("8888:9000") == (8888, 9000)
    assert parse_ports("0") == "ports are 1-65535"
    assert "node's port" in str(parse_ports("web"))


@pytest.mark.usefixtures("utc")  # times in the snapshot render in UTC
def test_job_detail_with_gpus(snap_compare, recorded: Engine) -> None:  # noqa: F811
    """A finished run keeps its GPU story: bars of the last sample, sparklines of the run."""
    run_dir = next(recorded.config.runs_dir.glob("trainer/*"))
    frames = (fake_gpu.DATA / "busy-2gpu.txt").read_text().split("---\n")
    with (run_dir / "events.jsonl").open("a") as handle:
        for i in range(24):
            sample = GpuMetrics(
                run_id=run_dir.name, seq=100 + i, t=1767355200.0 + 2 * i, gpus=parse(frames[i % 3])
            )
            handle.write(sample.model_dump_json() + "\n")
    Store().save(history.load(run_dir, 10).view)

    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await pilot.press("enter")
        await until(pilot, lambda: pilot.app.screen.query_one(GpuPanel).display)
        await until(pilot, lambda: pilot.app.screen.query_one("#log").line_count == 3)

    assert snap_compare(app_on(recorded), terminal_size=SIZE, run_before=ready)


@pytest.mark.usefixtures("utc")  # times in the snapshot render in UTC
def test_forward_modal(snap_compare, recorded: Engine) -> None:  # noqa: F811
    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        pilot.app.push_screen(ForwardScreen(recorded.runs()[0]))
        await pilot.pause()
        for field in pilot.app.screen.query("Input"):
            field.cursor_blink = False

    assert snap_compare(app_on(recorded), terminal_size=SIZE, run_before=ready)
