"""The real console's fork server never outlives it, whichever way it ends: quit, a kill,
a closed terminal — and kill -9, where nothing of the console runs: the server sees its
stdin close and goes by itself."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.smoke.test_tui_pty import console
from tests.support.processes import fork_servers, node_dirs, pid_alive
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("how", ["quit", "SIGTERM", "terminal closed", "SIGKILL"])
def test_a_console_that_ends_leaves_no_fork_server_and_no_node_dir(
    tmp_path: Path, how: str
) -> None:
    term = console(tmp_path)
    try:
        term.wait_for("No jobs yet")
        eventually(lambda: len(fork_servers(term.child.pid)) == 1, what="its fork server")
        [server] = fork_servers(term.child.pid)
        if how == "quit":
            term.press("q")
            assert term.wait_exit() == 0
        elif how == "terminal closed":
            term.hang_up()
        else:
            os.kill(term.child.pid, getattr(signal, how))
            term.wait_exit()
        eventually(lambda: not pid_alive(server), timeout=30, what="the fork server ended")
        assert node_dirs() == []
    finally:
        term.kill()
