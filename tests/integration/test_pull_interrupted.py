"""`swjob pull` interrupted (Ctrl-C) while its store has not answered: one line, exit 130,
nothing left under the destination — no traceback, and no abort in the store client's
runtime as the interpreter tears itself down (the reason `pull` ends with a quick exit).
The store here is a TCP listener that takes the connection and never answers: the pull
is then surely inside its first request when the signal comes."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cli import Cli

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def silent_store() -> Iterator[socket.socket]:
    """A listener on loopback that never answers what it accepts."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(60)  # the CLI's start-up on a loaded machine, then its dial
        yield listener


def test_an_interrupted_pull_says_so_in_one_line_and_exits_130(
    tmp_path: Path,
    clis: Callable[..., Cli],
    silent_store: socket.socket,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")  # no real store: any keys do
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret-key")
    port = silent_store.getsockname()[1]
    dest = tmp_path / "landed"
    pull = clis(
        "pull", "s3://bucket/results/job/run", "--endpoint", f"http://127.0.0.1:{port}",
        "--to", str(dest), cwd=tmp_path,
    )  # fmt: skip
    connection, _ = silent_store.accept()  # its first request: the manifest's
    with connection:
        pull.signal(signal.SIGINT)
        code = pull.wait(30)
    said = pull.output()
    assert code == 130, said
    assert "interrupted" in said and "Traceback" not in said, said
    assert len(said.strip().splitlines()) == 1, said
    assert not dest.exists() or not any(dest.rglob("*")), "something was left half-written"
