"""The real console's spare agent never outlives it, whichever way it ends: quit, a kill,
a closed terminal — and kill -9, where nothing of the console runs: the spare sees its
stdin close and goes by itself."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.smoke.test_tui_pty import console
from tests.support.processes import node_dirs, pid_alive, standby_agents
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("how", ["quit", "SIGTERM", "terminal closed", "SIGKILL"])
def test_a_console_that_ends_leaves_no_spare_agent_and_no_node_dir(
    tmp_path: Path, how: str
) -> None:
    term = console(tmp_path)
    try:
        term.wait_for("No jobs yet")
        eventually(lambda: len(standby_agents()) == 1, what="the console's spare agent")
        [spare] = standby_agents()
        if how == "quit":
            term.press("q")
            assert term.wait_exit() == 0
        elif how == "terminal closed":
            term.hang_up()
        else:
            os.kill(term.child.pid, getattr(signal, how))
            term.wait_exit()
        if how == "SIGKILL":  # on its own, once its stdin closed
            eventually(lambda: not pid_alive(spare), timeout=5, what="the spare ended")
            eventually(lambda: node_dirs() == [], timeout=5, what="its directory removed")
        else:  # ended by the console on its way out
            assert not pid_alive(spare) and node_dirs() == []
    finally:
        term.kill()
