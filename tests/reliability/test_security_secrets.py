"""Secrets stay redacted in every failure path, through real runs.

The job's env secret is printed by the job (stdout and stderr), put in file names and in
error messages; the Vast.ai API key is echoed back by a careless API. Neither may appear
anywhere under the run dir (outside `outputs/`, which is the user's data), in the store
(the state dir), in the engine's events and logs, or in what `swjob run` prints."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine.engine import Engine
from engine.report import events as ev
from engine.report.views import RunView
from tests.support.cli import swjob_run
from tests.support.engines import engine_with
from tests.support.runs import only_run_dir
from tests.support.tap import Tap

pytestmark = [pytest.mark.timeout(90)]

SECRET = "hunter2-swjob-secret-9f4c1e"
VAST_KEY = "vast-key-5b7d0c2e9a41f63d"
PRINTS = (
    'echo "token is $API_TOKEN"; echo "error: token $API_TOKEN rejected" >&2; '
    'touch "f-$API_TOKEN"; ls'
)


def outcome(view: RunView) -> str:
    """The run's state, and its reason when it has one (for the fault table)."""
    return f"{view.state} '{view.reason}'" if view.reason else view.state


def leaks(run_dir: Path, *texts: str) -> list[str]:
    """Where a secret shows: files (and file names) under the run dir but outside its
    outputs, everything in the state dir, and the given texts (events, logs, output)."""
    needles = [s.encode() for s in (SECRET, VAST_KEY)]
    found = []
    state = Path(os.environ["SWJOB_STATE_DIR"])
    files = [p for p in run_dir.rglob("*") if "outputs" not in p.relative_to(run_dir).parts]
    for path in [*files, *state.rglob("*")]:
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        if any(n in data or n in os.fsencode(path.name) for n in needles):
            found.append(str(path))
    found += [text[:200] for text in texts if any(n.decode() in text for n in needles)]
    return found


def events_text(tap: Tap) -> str:
    tap.drain()
    return "\n".join(event.model_dump_json() for _, event in tap.seen)


def log_text(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


async def until_printed(tap: Tap, run_id: str) -> None:
    await tap.until(
        lambda e: (
            e.run_id == run_id
            and isinstance(e, ev.Log)
            and any("started" in line.text for line in e.lines)
        )
    )


async def run_to_end(engine: Engine, tap: Tap, job, fault=None) -> RunView:
    run_id = await engine.submit(job, "local")
    if fault is not None:
        await until_printed(tap, run_id)
        await fault(engine, run_id)
    return await asyncio.wait_for(engine.wait(run_id), 60)


async def stop(engine: Engine, run_id: str) -> None:
    await engine.stop(run_id)


async def sigkill_agent(engine: Engine, run_id: str) -> None:
    os.kill(int(engine.run(run_id).node.offer["pid"]), signal.SIGKILL)


CASES = {
    "setup failure": (dict(setup=f"{PRINTS}; exit 3", run="true"), None, "setup failed"),
    "operator stop": (dict(run=f"{PRINTS}; echo started; sleep 300"), stop, "stopped by"),
    "node lost": (dict(run=f"{PRINTS}; echo started; sleep 300"), sigkill_agent, "node lost"),
    "refused output": (
        dict(
            run=f'{PRINTS}; mkdir out; echo ok > out/ok; ln -s /etc/passwd "out/l-$API_TOKEN"',
            outputs=["out"],
        ),
        None,
        "",
    ),
}


@pytest.mark.parametrize("case", CASES)
async def test_secrets_stay_redacted(
    tmp_path, make_job, record_fault, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    caplog.set_level(logging.DEBUG)
    fields, fault, reason = CASES[case]
    job = make_job(env={"API_TOKEN": SECRET}, **fields)
    async with engine_with(tmp_path / "runs", deadline_s=2.0) as engine:
        tap = Tap(engine)
        view = await run_to_end(engine, tap, job, fault)
        seen = events_text(tap)
        tap.close()
    if reason:
        assert reason in (view.reason or ""), view.reason
    else:
        assert view.state == "COMPLETED", view.reason
    printed = (view.run_dir / "logs" / f"{'setup' if 'setup' in case else 'run'}.log").read_text()
    assert "token is ***" in printed and "f-***" in printed  # the job printed it, in a name too
    if case == "refused output":  # the refusal named the link after the secret
        assert "l-***" in seen, "the refused output is named nowhere"
    assert leaks(view.run_dir, seen, log_text(caplog)) == []
    record_fault(
        f"secret printed, in a file name and an error message; {case}",
        None,
        f"{outcome(view)}; secret in no file, event, log or store",
    )


async def test_a_push_failure_naming_a_secret_file_is_redacted(
    tmp_path, make_job, record_fault, caplog: pytest.LogCaptureFixture
) -> None:
    """A workspace file whose name holds the secret and cannot be pushed (a line break)."""
    caplog.set_level(logging.DEBUG)
    project = tmp_path / "project"
    project.mkdir()
    (project / f"bad\n{SECRET}.txt").write_text("x")
    os.mkfifo(project / f"fifo-{SECRET}")
    job = make_job(env={"API_TOKEN": SECRET}, run=PRINTS, workspace={"workdir": "."})
    async with engine_with(tmp_path / "runs") as engine:
        tap = Tap(engine)
        view = await run_to_end(engine, tap, job)
        seen = events_text(tap)
        tap.close()
    assert view.terminal
    left_out = [
        e.message for _, e in tap.seen if isinstance(e, ev.Alert) and "left out" in e.message
    ]
    assert left_out, "the push never refused the paths named after the secret"
    assert "'fifo-***'" in left_out[0] and "***.txt" in left_out[0], left_out  # named, masked
    assert leaks(view.run_dir, seen, log_text(caplog), view.reason or "") == []
    record_fault(
        "workspace names holding the secret refused by the push",
        None,
        f"{outcome(view)}; secret in no file, event, log or store",
    )


# ---- through `swjob run` ---------------------------------------------------------------


class _CarelessApi(BaseHTTPRequestHandler):
    """A Vast.ai API that refuses every call and echoes the key it was sent."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._refuse()

    do_POST = do_PUT = do_DELETE = do_GET

    def _refuse(self) -> None:
        said = f"invalid key {self.headers.get('Authorization')} for {self.path}"
        body = json.dumps({"success": False, "error": "auth_error", "msg": said}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def careless_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CarelessApi)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_cli_run_failure_is_redacted(tmp_path, make_job, record_fault) -> None:
    job = make_job(env={"API_TOKEN": SECRET}, run=f"{PRINTS}; exit 4")
    code, printed = swjob_run(tmp_path, job.source)
    run_dir = only_run_dir(tmp_path / "runs", job.name)
    assert code == 1 and "token is ***" in printed and "exited with code 4" in printed
    assert leaks(run_dir, printed) == []
    record_fault(
        "secret printed by a failing run, followed by `swjob run`",
        None,
        "FAILED (exit 4); printed output, run dir and store redacted",
    )


def test_cli_provisioning_failure_is_redacted(
    tmp_path, make_job, record_fault, careless_api: str
) -> None:
    pools = tmp_path / "pools.toml"
    pools.write_text(
        '[pools.gpu]\nprovider = "vastai"\nmax_nodes = 1\nboot_timeout_s = 30\n'
        'image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"\n'
        'api_key_env = "SWJOB_TEST_VAST_KEY"\nagent_install = "swjob"\n'
    )
    job = make_job(env={"API_TOKEN": SECRET}, run=PRINTS)
    code, printed = swjob_run(
        tmp_path, job.source, "--pool", "gpu", "--pools", str(pools),
        SWJOB_VAST_URL=careless_api, SWJOB_TEST_VAST_KEY=VAST_KEY,
    )  # fmt: skip
    run_dir = only_run_dir(tmp_path / "runs", job.name)
    summary = json.loads((run_dir / "run.json").read_text())
    assert code == 1 and summary["reason"].startswith("provisioning failed"), printed
    assert "HTTP 401" in summary["reason"] and "***" in summary["reason"]  # the echo, redacted
    assert leaks(run_dir, printed) == []
    record_fault(
        "provider refuses and echoes the API key (HTTP 401), via `swjob run`",
        None,
        f"FAILED '{summary['reason']}'; key and secret in no file, store or output",
    )
