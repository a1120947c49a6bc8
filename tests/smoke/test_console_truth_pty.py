"""The real `swjob-tui` in a pty: its log tells the truth and it never freezes. A run it
adopts (its `swjob run` killed -9) shows its log from the first line, and following its
log survives resizes of the terminal; a node with 10,000 files is torn down while a key is
answered within half a second, or twice what the same key takes with nothing torn down
on a loaded machine (its tree was removed on the console's loop: 15-17 s)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.smoke.terminal import Terminal
from tests.smoke.test_tui_pty import console
from tests.support.cli import Cli
from tests.support.processes import node_dirs
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(150)

ANSWER_S = 0.5
MAKE = (
    "import os\n"
    "for d in range(1000):\n"
    "    os.makedirs(f'tree/{d}')\n"
    "    for f in range(10):\n"
    "        open(f'tree/{d}/{f}', 'w').write('x')\n"
)


def test_an_adopted_run_shows_its_first_line_and_following_survives_resizes(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    release = tmp_path / "release"
    project = tmp_path / "job"
    project.mkdir()
    run = (
        "for i in 1 2 3 4 5; do echo line $i; done; i=0; "
        f"while [ ! -e {release} ]; do i=$((i+1)); echo tick $i; sleep 0.1; done"
    )
    (project / "job.toml").write_text(f'[job]\nname = "adoptee"\nrun = "{run}"\n')
    cli = clis("run", str(project / "job.toml"), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    eventually(lambda: cli.has_printed("tick 1"), 60, what="the job's first lines")
    cli.kill9()  # its node goes on, owned by nobody: the console adopts it
    term = console(tmp_path)
    try:
        term.wait_for("RUNNING", timeout=60)
        term.press("\r")  # the detail of the run, following its tail
        # the detail's timeline ("in state"): the board's preview also follows the ticks,
        # and a `g` that reached the board (the enter not yet handled) did nothing here
        term.wait_for(lambda t: "in state" in t and "following" in t and "tick" in t, 30)
        term.press("g")  # its top: the first line, not the adoption's, and none twice
        text = term.wait_for(lambda t: "line 1" in t and "paused" in t, timeout=10)
        assert text.count("line 3") == 1, text
        term.press("G")
        term.wait_for("following", timeout=10)
        for cols, rows in ((80, 24), (160, 45), (100, 30)):
            term.resize(cols, rows)
            seen = last_tick(term.text())
            # redrawn at its new size, still following: the newest ticks keep coming in
            text = term.wait_for(lambda t, s=seen: "following" in t and last_tick(t) > s + 5)
            assert "paused" not in text, text
        release.touch()
        term.wait_for("COMPLETED", timeout=60)
        term.press("q")
        assert term.wait_exit() == 0
    finally:
        term.kill()


def answered(term: Terminal) -> float:
    """How long `P` (the pools panel, folded or shown) took to show on the screen."""
    shown = "this machine" in term.text()
    asked = time.monotonic()
    term.press("P")
    term.wait_for(lambda text: ("this machine" in text) != shown, timeout=20)
    return time.monotonic() - asked


def last_tick(text: str) -> int:
    return max([0, *(int(n) for n in re.findall(r"tick (\d+)", text))])


def test_a_key_is_answered_while_a_node_of_10000_files_is_torn_down(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "make.py").write_text(MAKE)
    (job / "job.toml").write_text(
        '[job]\nname = "big"\nrun = "python3 make.py"\nworkspace = { workdir = "." }\n'
    )
    # its 10,000 files written at the node's full share: giving way to the console (its
    # default) on a loaded machine, they took over 90 s; the console's loop is the subject
    pools = tmp_path / "pools.toml"
    pools.write_text('[pools.local]\nprovider = "local"\nnode_nice = 0\n')
    term = console(tmp_path, str(job / "job.toml"), "--pools", str(pools))
    try:
        term.wait_for("COMPLETED", timeout=90)  # its node is being torn down
        during = [answered(term)]
        while node_dirs():  # keys pressed while its tree goes
            during.append(answered(term))
        control = max(answered(term) for _ in range(3))  # the same key, nothing torn down
        # a loaded machine slows every answer alike: the limit grows with the control's
        limit = max(ANSWER_S, 2 * control)
        assert max(during) < limit, f"P answered after {max(during):.2f} s (control {control:.2f})"
        term.press("q")
        assert term.wait_exit() == 0
    finally:
        term.kill()
