"""`!` in the real `swjob-tui` in a pseudo-terminal: the console steps aside for a shell on
the node, the shell works in the terminal, and the console comes back when it exits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.smoke.test_tui_pty import console
from tests.support.jobs import write_job

pytestmark = pytest.mark.timeout(120)


def test_bang_opens_a_shell_on_the_node_and_the_console_resumes(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job", name="longjob", run="sleep 60", outputs=["out.txt"])
    term = console(tmp_path, str(job))
    try:
        term.wait_for(lambda text: "RUNNING" in text and " run " in text)
        term.press("!")
        term.wait_for("connecting to the node of")  # not a blank screen while it connects
        # the shell's prompt: the node's workdir, wrapped wherever the test's temp path
        # ends a row (keys typed before it may still go to the console, as with any
        # program that takes the terminal over)
        term.wait_for(lambda text: "/work" in "".join(text.splitlines()))
        term.press(*"echo MARK-$((6*7))", "\r")
        term.wait_for("MARK-42")  # only the command's output: the echo shows the $(( ))
        term.press(*"exit 3", "\r")
        term.wait_for("exited with 3")  # the console is back, with the shell's status
        term.press("q")
        term.wait_for("still running")
        term.press("s")
        assert term.wait_exit(60) == 0
    finally:
        term.kill()
