"""Every run ends: whatever raises while the orchestrator carries out an
FSM command, the run ends FAILED with one line "internal error: …" and its node — a real
agent process — is torn down. Faults go in through real seams: a provider subclass, a
workspace the walk cannot read, run-dir paths the engine cannot write (a directory where a
log file goes). Outputs that cannot land (a file where outputs/ goes) are no internal
error: the exit code's verdict stands and they are reported not collected."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.providers.base import Bootstrap, NodeHandle
from engine.providers.local import LocalProvider
from engine.report import events as ev
from engine.run.orchestrator import SHUTDOWN_TIMEOUT_S
from tests.support.engines import engine_with
from tests.support.processes import pid_alive
from tests.support.tap import Tap

pytestmark = [pytest.mark.timeout(90)]


class Recording(LocalProvider):
    """The real local provider, remembering the nodes it started (to check their agents)."""

    def __init__(self) -> None:
        super().__init__(4, stop_grace_s=1.0)
        self.handles: list[NodeHandle] = []

    async def provision(self, bootstrap: Bootstrap) -> NodeHandle:
        handle = await super().provision(bootstrap)
        self.handles.append(handle)
        return handle

    def agent_pids(self) -> list[int]:
        return [int(h.offer["pid"]) for h in self.handles]


class BadOffer(Recording):
    """Starts a real agent, then hands back a handle whose offer no event can carry (as an
    SDK answering in an unexpected shape would)."""

    async def provision(self, bootstrap: Bootstrap) -> NodeHandle:
        handle = await super().provision(bootstrap)
        return dataclasses.replace(handle, offer={**handle.offer, "gpus": ["a", "b"]})


class TeardownFails(Recording):
    """Teardown raises an unexpected error the first `times` calls, then works."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times, self.calls = times, 0

    async def teardown(self, handle: NodeHandle) -> None:
        self.calls += 1
        if self.calls <= self.times:
            raise RuntimeError("teardown exploded")
        await super().teardown(handle)


def too_deep(root: Path) -> None:
    """A directory chain longer than PATH_MAX: every walk fails on it, even as root (an
    unreadable directory, the issue's case, is read by root anyway)."""
    fd = os.open(root, os.O_RDONLY)
    for _ in range(20):
        os.mkdir("d" * 250, dir_fd=fd)
        inner = os.open("d" * 250, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)


Prepare = Callable[[Path, Path], None]  # (workspace, run_dir), before the first command runs


def _unreadable(workspace: Path, _run_dir: Path) -> None:
    (workspace / "private").mkdir()
    (workspace / "private").chmod(0)


def _too_deep(workspace: Path, _run_dir: Path) -> None:
    too_deep(workspace)


def _log_is_a_dir(step: str) -> Prepare:
    def prepare(_ws: Path, run_dir: Path) -> None:
        (run_dir / "logs" / f"{step}.log").mkdir()

    return prepare


def _outputs_is_a_file(_ws: Path, run_dir: Path) -> None:
    (run_dir / "outputs").write_text("in the way")


def _nothing(_ws: Path, _run_dir: Path) -> None:
    pass


CASES: dict[str, tuple[type[Recording], Prepare, str, str]] = {
    # the command that raises: (provider, prepare, the job's run, the run's reason)
    "ProvisionNode": (BadOffer, _nothing, "true", "internal error: ValidationError"),
    "MaterializeWorkspace-unreadable": (
        Recording,
        _unreadable,
        "true",
        "internal error: PermissionError",
    ),
    "MaterializeWorkspace-too-deep": (Recording, _too_deep, "true", "internal error: OSError"),
    "RunSetup": (Recording, _log_is_a_dir("setup"), "true", "internal error: IsADirectoryError"),
    "RunJob": (Recording, _log_is_a_dir("run"), "true", "internal error: IsADirectoryError"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_an_exception_in_any_command_ends_the_run_and_tears_down(
    tmp_path, make_job, record_fault, case: str
) -> None:
    provider_type, prepare, command, reason = CASES[case]
    if case.endswith("unreadable") and os.geteuid() == 0:
        pytest.skip("root reads a mode-000 directory; the too-deep case covers root")
    workspace = tmp_path / "project"
    workspace.mkdir()
    job = make_job(run=command, setup="true", workspace={"workdir": "."}, outputs=["o"])
    provider = provider_type()
    try:
        async with engine_with(tmp_path / "runs", grace_s=1.0) as engine:
            engine._providers.built["local"] = provider
            tap = Tap(engine)
            run_id = await engine.submit(job, "local")
            prepare(workspace, engine.run(run_id).run_dir)  # the driver has not started yet
            view = await asyncio.wait_for(engine.wait(run_id), 60)
            tap.close()
    finally:
        if (workspace / "private").exists():
            (workspace / "private").chmod(0o700)
        shutil.rmtree(workspace / ("d" * 250), ignore_errors=True)
    assert view.state == "FAILED" and view.phase == "done", view
    assert view.reason.startswith(reason) and "\n" not in view.reason, view.reason
    internal = [e for e in tap.events(run_id) if isinstance(e, ev.Transition)]
    assert any(t.cause == "InternalError" for t in internal), [t.cause for t in internal]
    # the node is asked to go at once: no wait for the exit of a step it was never sent
    raised = next(t.ts for t in internal if t.cause == "InternalError")
    ended = next(e.ts for e in tap.events(run_id) if isinstance(e, ev.Finished))
    assert (ended - raised).total_seconds() < SHUTDOWN_TIMEOUT_S, "teardown waited"
    assert len(provider.handles) == 1 and not any(map(pid_alive, provider.agent_pids()))
    record_fault(f"{case} raises", None, f"FAILED '{view.reason[:70]}', node gone")


@pytest.mark.parametrize("code", [0, 3])
async def test_outputs_that_cannot_land_keep_the_verdict_and_say_why(
    tmp_path, make_job, record_fault, code: int
) -> None:
    """A file where outputs/ goes: it was "FAILED — internal error: FileExistsError" after
    exit 0. The exit code decides; what could not land is said, naming the path."""
    job = make_job(run=f"echo x > o; exit {code}", outputs=["o"])
    provider = Recording()
    async with engine_with(tmp_path / "runs", grace_s=1.0) as engine:
        engine._providers.built["local"] = provider
        run_id = await engine.submit(job, "local")
        run_dir = engine.run(run_id).run_dir
        _outputs_is_a_file(tmp_path, run_dir)  # the driver has not started yet
        view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert (view.state, view.exit_code) == ("COMPLETED" if code == 0 else "FAILED", code), view
    assert view.reason == (None if code == 0 else "run exited with code 3"), view.reason
    assert (
        view.outputs_note == f"outputs not collected: cannot write {run_dir}/outputs: File exists"
    )
    assert view.missing_outputs == ["o"] and not (run_dir / "manifest.json").exists()
    assert len(provider.handles) == 1 and not any(map(pid_alive, provider.agent_pids()))
    record_fault(f"outputs/ in the way after exit {code}", None, f"{view.state}, node gone")


@pytest.mark.parametrize("times", [1, 99])
async def test_a_teardown_that_raises_is_retried_and_never_hangs(
    tmp_path, make_job, record_fault, times: int, monkeypatch
) -> None:
    """Raises once: the retry tears the node down. Raises always: the run still ends,
    with a persistent alert naming the node (the test then cleans the agent up). The
    retries count, not the production backoff between them."""
    monkeypatch.setattr("engine.run.teardown.BACKOFF_S", 0.01)
    provider = TeardownFails(times)
    job = make_job(run="echo done")
    async with engine_with(tmp_path / "runs", grace_s=1.0) as engine:
        engine._providers.built["local"] = provider
        tap = Tap(engine)
        try:
            run_id = await engine.submit(job, "local")
            view = await asyncio.wait_for(engine.wait(run_id), 60)
            tap.drain()
            alerts = [e.message for e in tap.events(run_id) if isinstance(e, ev.Alert)]
        finally:
            tap.close()
            for handle in provider.handles:
                await LocalProvider.teardown(provider, handle)
    assert view.state == "COMPLETED" and view.phase == "done", view
    if times == 1:
        assert provider.calls == 2 and alerts == []
    else:
        assert provider.calls == 3
        assert any("failed: RuntimeError: teardown exploded" in a for a in alerts), alerts
        assert any("teardown exploded" in a for a in view.alerts), view.alerts
    assert not any(map(pid_alive, provider.agent_pids()))
    outcome = "retried, node gone" if times == 1 else "run ends, persistent alert"
    record_fault(f"provider teardown raises {min(times, 3)}x", None, outcome)
