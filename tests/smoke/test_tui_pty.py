"""The real `swjob-tui` binary in a pseudo-terminal: what a person at a terminal sees."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from engine.report.printable import printable
from engine.state.store import Store
from tests.smoke.terminal import Terminal
from tests.standin.server import StandIn
from tests.support.jobs import write_job
from tests.support.processes import pid_alive
from tests.support.runs import agent_pid, only_run_dir, run_json, waiting_job
from tests.support.sqlitelock import locked
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

BIN = Path(sys.executable).parent


def vast_pools(path: Path) -> Path:
    path.write_text(
        "[pools.gpu]\n"
        'provider = "vastai"\n'
        'image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"\n'
        "boot_timeout_s = 60\n"
        'agent_install = "swjob==0.1.0"\n'
        "[pools.gpu.resources]\ngpu_count = 1\n"
    )
    return path


def console(
    tmp_path: Path, *args: str, cols: int = 120, rows: int = 40, env: dict[str, str] | None = None
) -> Terminal:
    """The real binary in a real terminal of `cols`×`rows`, on this test's state dirs."""
    env = {**os.environ, "TERM": "xterm-256color", **(env or {})}
    env.pop("COLUMNS", None), env.pop("LINES", None)
    argv = [str(BIN / "swjob-tui"), "--runs-dir", str(tmp_path / "runs"), *args]
    return Terminal(argv, cwd=tmp_path, env=env, cols=cols, rows=rows)


def test_a_vast_pool_runs_a_job_to_completed_from_the_console(tmp_path: Path, api: StandIn) -> None:
    job = write_job(
        tmp_path / "job", name="vastjob", run="echo hello > out.txt", outputs=["out.txt"]
    )
    pools = vast_pools(tmp_path / "pools.toml")
    term = console(tmp_path, str(job), "--pool", "gpu", "--pools", str(pools))
    try:
        term.wait_for("COMPLETED", timeout=60)
        term.press("x")  # the account is listed, not "listing…" forever
        term.wait_for("no orphaned nodes")
        term.press("n")
        term.wait_for(lambda text: "Orphaned nodes" not in text)
        term.press("q")
        assert term.wait_exit() == 0
    finally:
        term.kill()
    assert (tmp_path / "runs" / "vastjob").is_dir()


HOSTILE_RUN = "; ".join(
    [
        r"printf '\033[2J\033[Hcleared?\n'",  # clear the screen, cursor home
        r"printf '\033[31mred\033[0m\n'",  # a colour
        r"printf '\033]52;c;ZXZpbA==\007osc\n'",  # write the clipboard
        r"printf '\033[?1049h\033[5;5Hmoved\n'",  # alternate screen, move the cursor
        "echo done > out.txt",
    ]
)


def test_hostile_job_output_leaves_the_screen_intact_at_80x24(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job", name="hostile", run=HOSTILE_RUN, outputs=["out.txt"])
    term = console(tmp_path, str(job), cols=80, rows=24)
    try:
        term.wait_for("COMPLETED")
        term.press("\r")  # the detail, with the log pane
        screen = term.wait_for(lambda text: "cleared?" in text and "moved" in text)
        rows = screen.splitlines()
        assert "swjob" in rows[0], screen  # the header was not cleared or overwritten
        log_rows = [row for row in rows if "run " in row and ("cleared?" in row or "red" in row)]
        assert log_rows and all(
            row.rstrip().endswith(("│", "▌", "▐", "▎", "▊")) for row in log_rows
        ), screen
        assert b"\x1b]52" not in term.transcript and b"\x1b[?1049h\x1b[5;5H" not in term.transcript
        term.press("q")
        assert term.wait_exit() == 0
    finally:
        term.kill()


def test_failing_editor_and_pager_are_toasts_and_a_job_submitted_with_n_runs(
    tmp_path: Path,
) -> None:
    run = "echo nice $(nice); echo data > out.txt"
    write_job(tmp_path / "job", name="edited", run=run, outputs=["out.txt"])
    env_extra = {"EDITOR": "no-such-editor-swjob", "PAGER": "false"}
    term = console(tmp_path, env=env_extra)
    try:
        term.wait_for("No jobs yet")
        term.press("n")
        term.wait_for("Submit a job")
        term.press(*"job/job.toml", "\r")
        term.wait_for("COMPLETED")
        # the console's local nodes give way to it (tui.app.NODE_NICE)
        assert "nice 10" in next((tmp_path / "runs").glob("*/*/logs/run.log")).read_text()
        term.press("o")
        term.wait_for("sha256")  # outputs browser, a file previewed
        term.press("e")
        term.wait_for("cannot start no-such-editor-swjob")
        term.press("v")
        term.wait_for("false exited with code 1")
        term.press("\x1b")
        term.wait_for("COMPLETED")
        term.press("q")
        assert term.wait_exit() == 0
    finally:
        term.kill()


@pytest.mark.parametrize("how", ["terminal closed", "SIGTERM"])
def test_a_closed_terminal_or_a_kill_stops_the_runs_and_tears_their_nodes_down(
    tmp_path: Path, how: str
) -> None:
    job = waiting_job(tmp_path / "job", "held", tmp_path / "never-released")
    term = console(tmp_path, str(job))
    try:
        term.wait_for(lambda text: "RUNNING" in text and " run " in text)
        run_dir = only_run_dir(tmp_path / "runs", "held")
        node = agent_pid(run_dir)
        if how == "SIGTERM":
            os.kill(term.child.pid, signal.SIGTERM)
            term.wait_exit()
        else:
            term.hang_up()
        eventually(lambda: not pid_alive(node), what="the node torn down")
        assert run_json(run_dir)["reason"] == "stopped by operator"
    finally:
        term.kill()


def test_the_closing_note_is_said_once_after_the_screen_and_the_warning_is_in_the_log(
    tmp_path: Path,
) -> None:
    """Quit while another process holds the run index: its last rows cannot be written,
    and the note saying where they are kept reaches the terminal once, after the screen,
    as `swjob-tui: …`. The engine's warning of it went to the console's log file (0600),
    not raw to the terminal too — it was printed twice."""
    index = Store()  # the index as a user has it: made by an earlier swjob
    index.close()
    job = waiting_job(tmp_path / "job", "held", tmp_path / "never-released")
    with locked(index.path):
        term = console(tmp_path, str(job))
        try:
            term.wait_for(lambda text: "RUNNING" in text and " run " in text)
            term.press("q")
            term.wait_for("Leave running")
            term.press("s")  # stop all: the run ends here, its last row unwritten
            assert term.wait_exit() == 0
        finally:
            term.kill()
    transcript = bytes(term.transcript)
    left = transcript.rpartition(b"\x1b[?1049l")[2]  # what came once the screen was gone
    after = printable(left.decode(errors="replace").replace("\r", ""), lines=True)
    note = "run index not written at exit"
    assert transcript.count(note.encode()) == 1, after
    said = [line.strip() for line in after.splitlines() if note in line]
    assert len(said) == 1 and said[0].startswith(f"swjob-tui: {note}"), after
    log = Path(os.environ["SWJOB_STATE_DIR"]) / "swjob-tui.log"
    assert log.stat().st_mode & 0o777 == 0o600
    assert log.read_text().count(note) == 1
    assert f"logged in {log}" in after
