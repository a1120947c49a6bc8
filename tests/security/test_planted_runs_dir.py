"""Another local user plants the runs directory: `swjob run` from a shared folder (the
default runs dir is `./swjob-runs`) where that user made `swjob-runs` beforehand — their
own directory, or a link of theirs to one.

A directory on the way to a run's landing dir that another user owns is one they can
empty and refill while the run goes on: move the run's directory aside and put in its
place one of their own whose `outputs` links to where they read (seen: the job's output
landed 0644 in the other user's folder). So swjob refuses to land runs there, naming the
path, before anything is rented or written.

The other user is played by uid 1234 (the files are chowned: root only).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli import swjob

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's files needs root"),
]

OTHER = 1234
JOB = '[job]\nname = "hello"\nrun = "echo secret-output > out.txt"\noutputs = ["out.txt"]\n'


def _theirs(path: Path) -> Path:
    os.lchown(path, OTHER, OTHER)
    return path


def _refused(tmp_path: Path, shared: Path) -> str:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "job.toml").write_text(JOB)
    done = swjob("run", str(tmp_path / "job" / "job.toml"), cwd=shared)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "another user" in out, out
    assert "secret-output" not in out
    return out


def test_a_runs_dir_another_user_made_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    planted = shared / "swjob-runs"
    planted.mkdir()
    planted.chmod(0o777)
    _theirs(planted)
    out = _refused(tmp_path, shared)
    assert f"{planted}: belongs to another user (uid {OTHER})" in out, out
    assert list(planted.iterdir()) == []


def test_a_link_another_user_planted_in_the_runs_dir_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    loot = tmp_path / "loot"
    loot.mkdir()
    loot.chmod(0o777)
    _theirs(loot)
    runs = shared / "swjob-runs"
    runs.mkdir()
    runs.chmod(0o777)  # a runs dir left writable by everyone: anyone may plant in it
    (runs / "hello").symlink_to(loot)
    _theirs(runs / "hello")
    _refused(tmp_path, shared)
    assert list(loot.iterdir()) == []


def test_a_state_dir_another_user_owns_is_refused(tmp_path: Path) -> None:
    """The state dir holds the engine's iroh key and every run's join token: one whose
    owner is someone else could be read back (they can chmod it) or seeded with a key
    they know. Tightening its mode is not enough; swjob will not use it."""
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    _theirs(state)
    (tmp_path / "job.toml").write_text(JOB)
    done = swjob("run", "job.toml", cwd=tmp_path, env={"SWJOB_STATE_DIR": str(state)})
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert f"{state}: belongs to another user (uid {OTHER})" in out, out
    assert list(state.iterdir()) == []
