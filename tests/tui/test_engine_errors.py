"""Every engine call the console makes ends in an answer the operator sees: a failure
is a toast or an inline error naming the cause, a call that hangs times out and says so.

The engine here is the real one; where a test needs a call to fail in a way the real
engine only does on a broken machine (an exception from deep inside), a subclass
overrides that one call — the console's handling is what is under test.
"""

from __future__ import annotations

import asyncio

import pytest

from engine.engine import Engine
from engine.jobs.jobspec import JobSpec
from engine.jobs.pools import Pool
from tests.support.engines import engine_config
from tests.tui.conftest import SIZE, booted, screen_text, toasts, until
from tui import calls
from tui.app import SwjobApp
from tui.screens.orphans import OrphansScreen


class BrokenEngine(Engine):
    """A real engine whose submit fails as an SDK bug would: not with a SubmitError."""

    async def submit(self, job: JobSpec, pool: str) -> str:
        raise AttributeError("'_PrintCapture' object has no attribute 'encoding'")


class UnstartableEngine(Engine):
    async def start(self) -> None:
        raise PermissionError(13, "Permission denied", "/state/runs.sqlite")


async def test_a_submit_that_raises_is_a_toast_naming_the_cause(tmp_path, make_job) -> None:
    job = make_job(name="boom", run="true")
    app = SwjobApp(BrokenEngine(engine_config(tmp_path / "runs")), jobs=[job], cwd=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await until(pilot, lambda: any("submit boom" in t for t in toasts(app)))
        (toast,) = [t for t in toasts(app) if "submit boom" in t]
        assert "AttributeError" in toast and "encoding" in toast
        await pilot.press("n", *"job-boom/job.toml")  # the modal shows it inline
        await pilot.press("enter")
        await until(pilot, lambda: "submit: AttributeError" in screen_text(app))


async def test_an_engine_that_cannot_start_says_why(tmp_path) -> None:
    app = SwjobApp(UnstartableEngine(engine_config(tmp_path / "runs")))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: any("start the engine" in t for t in toasts(app)))
        assert "Permission denied" in toasts(app)[0]
        assert app.is_running  # the console stays up to be read


async def test_listing_orphans_that_never_answers_times_out_with_a_message(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(calls, "LIST_TIMEOUT_S", 0.3)

    async def hang() -> list:
        await asyncio.Event().wait()
        return []

    app = SwjobApp(Engine(engine_config(tmp_path / "runs")))
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        screen = OrphansScreen(hang)
        app.push_screen(screen)
        await until(pilot, lambda: "list orphaned nodes: no answer after 0.3 s" in screen_text(app))
        assert screen.found is None
        await pilot.press("y")  # nothing was listed: nothing to destroy
        assert not isinstance(app.screen, OrphansScreen)


async def test_a_start_up_orphan_check_that_fails_is_a_toast(tmp_path, monkeypatch) -> None:
    """A rented pool whose key variable is unset: the check cannot list the account,
    and says so instead of dying silently (and the x action says it again)."""
    monkeypatch.delenv("SWJOB_TEST_NO_KEY", raising=False)
    gpu = Pool(
        name="gpu",
        provider="vastai",
        image="pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime",
        api_key_env="SWJOB_TEST_NO_KEY",
    )
    engine = Engine(engine_config(tmp_path / "runs", gpu))
    app = SwjobApp(engine)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await until(
            pilot, lambda: any("could not check for orphaned nodes" in t for t in toasts(app))
        )
        assert any("SWJOB_TEST_NO_KEY is not set" in t for t in toasts(app))
        await pilot.press("x")
        await until(pilot, lambda: "SWJOB_TEST_NO_KEY is not set" in screen_text(app))


@pytest.mark.parametrize("failure", ["missing", "nonzero"])
def test_external_programs_report_how_they_failed(failure: str) -> None:
    from tui.screens.outputs import run_external

    if failure == "missing":
        assert run_external(["no-such-editor-swjob", "f"]) == (
            "cannot start no-such-editor-swjob: No such file or directory"
        )
    else:
        assert run_external(["false"]) == "false exited with code 1"
    assert run_external(["true"]) is None
