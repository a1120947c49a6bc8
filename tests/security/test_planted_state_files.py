"""Something the user's other programs left at a name swjob keeps its state under: a
symbolic link, a fifo. swjob makes regular files only; anything else is refused in one
line naming it, before it is opened — never written through, never a traceback.

Seen before: a fifo at an engine identity's lock, key or port file hung `swjob run` for
good; a link at its key had the engine's secret key written into the file it pointed to
(and at its port file, the port); a file at `leases` or `live` ended `swjob run` in a
traceback, as a fifo at runs.sqlite did ("disk I/O error");
a link at runs.sqlite was opened through (a database it pointed to would have taken
swjob's rows; anything else said "DatabaseError: file is not a database"); links at the
sidecars (-wal) went unremarked; a fifo at a pool's slot file failed the run with
"[Errno 29] Illegal seek", naming no file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.state.identity import operator_id
from engine.state.ledger import Ledger
from engine.state.locked import StateNotWritten
from tests.support.cli import swjob
from tests.support.runs import unfinished_run

pytestmark = pytest.mark.timeout(60)

JOB = '[job]\nname = "hello"\nrun = "echo hi > out.txt"\noutputs = ["out.txt"]\n'
VICTIM_TEXT = "the user's own file\n"


def _plant(place: Path, kind: str, victim: Path) -> None:
    place.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(place)
    elif kind == "file":
        place.write_text("")
    else:
        place.symlink_to(victim)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("runs.sqlite", "fifo"),
        ("runs.sqlite-wal", "link"),
        ("engine-0.key", "link"),
        ("engine-0.lock", "fifo"),
        ("engine-0.port", "link"),
        ("leases", "file"),
        ("slots", "file"),
        ("slots/pool-local/0", "fifo"),
    ],
)
def test_a_state_file_planted_as_a_link_or_fifo_is_refused_naming_it(
    tmp_path: Path, name: str, kind: str
) -> None:
    state = Path(os.environ["SWJOB_STATE_DIR"])
    state.mkdir(mode=0o700, parents=True)
    victim = tmp_path / "victim"
    victim.write_text(VICTIM_TEXT)
    place = state / name
    _plant(place, kind, victim)
    (tmp_path / "job.toml").write_text(JOB)
    done = swjob("run", "job.toml", cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    what = {"fifo": "a fifo", "file": "a file", "link": "a symbolic link"}[kind]
    made = "a directory" if kind == "file" else "a file"
    assert f"{place}: {what}, not {made} swjob made; move it away" in out, out
    assert "Traceback" not in out and "Errno" not in out, out
    assert victim.read_text() == VICTIM_TEXT


def test_an_operator_id_planted_as_a_fifo_is_refused_not_waited_on() -> None:
    """Read on every Vast.ai create (its instance label): a fifo there blocked for good."""
    state = Path(os.environ["SWJOB_STATE_DIR"])
    state.mkdir(mode=0o700, parents=True)
    os.mkfifo(state / "operator-id")
    with pytest.raises(StateNotWritten, match="operator-id: a fifo"):
        operator_id()


def test_a_ledger_planted_as_a_link_is_never_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text(VICTIM_TEXT)
    ledger = Ledger()  # made by swjob; then the user's program swaps a sidecar for a link
    (ledger.path.parent / "ledger.sqlite-wal").unlink(missing_ok=True)
    (ledger.path.parent / "ledger.sqlite-wal").symlink_to(victim)
    with pytest.raises(StateNotWritten, match=r"ledger\.sqlite-wal: a symbolic link"):
        ledger.record_intent("run-1", "vastai", "swjob:run-1", pool="gpu")
    assert victim.read_text() == VICTIM_TEXT


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_runs_event_log_swapped_while_its_owner_was_away_is_refused_by_attach(
    tmp_path: Path, kind: str
) -> None:
    """The run's owner died; meanwhile a program of the user's put a fifo (or a link) where
    its events.jsonl was. `swjob attach` read it and waited for a writer for good (or would
    append the run's events wherever the link points)."""
    run_dir = unfinished_run(tmp_path / "runs", "run-away", pool="local")
    log = run_dir / "events.jsonl"
    log.unlink()
    victim = tmp_path / "victim"
    victim.write_text(VICTIM_TEXT)
    _plant(log, kind, victim)
    done = swjob("attach", "run-away", cwd=tmp_path, timeout=30)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    what = "a fifo" if kind == "fifo" else "a symbolic link"
    assert f"{log}: {what}, not a file swjob made; move it away" in out, out
    assert "Traceback" not in out, out
    assert victim.read_text() == VICTIM_TEXT


def test_an_adopters_log_restore_writes_through_no_planted_link(tmp_path: Path) -> None:
    """An adopter rewrites each step log from the datastream through a scratch file beside
    it: one planted there as a link had the log's lines written where it pointed."""
    from agent.protocol import LogLine, Step
    from engine.report import events as ev
    from engine.run.runrecord import LogFiles

    logs, outside = tmp_path / "logs", tmp_path / "outside.txt"
    outside.write_text("keep\n")
    logs.mkdir()
    (logs / "run.log.restoring").symlink_to(outside)
    files = LogFiles(logs)
    line = LogLine(stream="stdout", text="restored")
    files.restore([ev.Log(run_id="r", step=Step.RUN, lines=[line], node_seq=1)])
    files.close()
    assert outside.read_text() == "keep\n"
    assert (logs / "run.log").read_text() == "restored\n"
