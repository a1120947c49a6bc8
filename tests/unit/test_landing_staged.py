"""A staged receiver (pulled outputs) shows no output before it is whole, with no rename a file.

What lands in a directory the landing root does not hold yet goes into a hidden staging
directory and is renamed into place, a whole new directory at a time, when the receiver
closes; a directory the root already holds takes its files by rename, as before.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from agent.inflight import IN_FLIGHT_EXCLUDES, holds_outputs, is_in_flight
from agent.transfer import wire
from agent.transfer.receiver import Receiver
from agent.transfer.walk import Entry, walk_tree
from engine.run.reconcile import reconcile
from tests.support.waiting import eventually

MTIME = 1_000_000_000_000_000_000
REPO = Path(__file__).resolve().parents[2]


def _records(files: dict[str, bytes], dirs: dict[str, int] | None = None) -> list:
    """Records as a batch decodes them: `dir` metas, then each file as its `F` frame's meta."""
    out: list = [({"t": "dir", "p": p, "m": m}, None) for p, m in (dirs or {}).items()]
    for path, data in files.items():
        out.append((wire.FileMeta(path, 0o640, MTIME, hashlib.sha256(data).digest()), data))
    return out


def _visible(root: Path) -> set[str]:
    """What a viewer of the landing dir lists: every path, in-flight names and what is
    under them left out (the console's outputs browser hides them the same way)."""
    shown: set[str] = set()
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not is_in_flight(d)]
        rel = os.path.relpath(top, root)
        for name in [*dirs, *files]:
            if not is_in_flight(name):
                shown.add(name if rel == "." else f"{rel}/{name}")
    return shown


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie has ended: its reaper is init, not this test)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _staged(root: Path) -> list[str]:
    return [name for name in os.listdir(root) if is_in_flight(name)]


TREE = {"run/a.txt": b"a" * 100, "run/deep/b.txt": b"b" * 2000, "run/deep/c.txt": b""}


def test_new_directories_show_only_once_the_receiver_closes(tmp_path: Path) -> None:
    receiver = Receiver(tmp_path, hash_chunked=True, per_file=True, staged=True)
    receiver._apply_job(_records({**TREE, "top.txt": b"t"}, {"run/deep": 0o750}))
    assert _visible(tmp_path) == {"top.txt"}  # top level: its own name, by rename, whole
    assert len(_staged(tmp_path)) == 1
    receiver.close()
    assert _visible(tmp_path) == {"top.txt", "run", "run/deep", *TREE}
    assert all((tmp_path / p).read_bytes() == data for p, data in TREE.items())
    assert oct((tmp_path / "run/deep/b.txt").stat().st_mode & 0o777) == oct(0o640)
    assert (tmp_path / "run/deep/b.txt").stat().st_mtime_ns == MTIME
    assert oct((tmp_path / "run/deep").stat().st_mode & 0o777) == oct(0o750)
    assert _staged(tmp_path) == [] and set(receiver.verified) == {*TREE, "top.txt"}


def test_a_pull_into_outputs_already_there_lands_beside_them_and_again(tmp_path: Path) -> None:
    """A live sync's earlier landing, then a repeated pull of everything: what the root
    holds is replaced by rename, what it does not goes through the stage."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "old.txt").write_bytes(b"synced earlier")
    newer = {**TREE, "run/a.txt": b"rewritten", "run/new/x.txt": b"x"}
    for files in (TREE, newer):
        receiver = Receiver(tmp_path, hash_chunked=True, per_file=True, staged=True)
        receiver._apply_job(_records(files))
        receiver.close()
        assert set(receiver.verified) == set(files) and not receiver.failed
        assert all((tmp_path / p).read_bytes() == data for p, data in files.items())
        assert (tmp_path / "run" / "old.txt").read_bytes() == b"synced earlier"
        assert _staged(tmp_path) == []


def test_a_new_directory_taken_meanwhile_fails_its_files_never_writes_through(
    tmp_path: Path,
) -> None:
    """Something put at a new directory's name before the pull closed (a link out, here):
    its files are not outputs (failed, said why), and nothing lands through the link."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    receiver = Receiver(out, hash_chunked=True, per_file=True, staged=True)
    receiver._apply_job(_records({**TREE, "kept/k.txt": b"k"}))
    os.symlink(elsewhere, out / "run")
    receiver.close()
    assert set(receiver.verified) == {"kept/k.txt"}
    assert set(receiver.failed) == set(TREE)
    assert all("cannot place 'run'" in why for why in receiver.failed.values())
    assert os.listdir(elsewhere) == [] and _staged(out) == []
    assert (out / "kept" / "k.txt").read_bytes() == b"k"


_KILLED_MID_PULL = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from tests.unit.test_landing_staged import TREE, _batch, _records
    from agent.transfer import landproc, wire
    from agent.transfer.receiver import Receiver

    landers = sys.argv[2] == "landers"
    receiver = Receiver(
        Path(sys.argv[1]), hash_chunked=True, per_file=True, staged=True,
        landers_after=0 if landers else None,
    )
    if landers:
        asyncio.run(receiver._land_elsewhere(wire.BATCH, _batch(TREE)))
    else:
        receiver._apply_job(_records(TREE))
    print("landed", *landproc.pids(), flush=True)
    sys.stdin.read()  # killed here, before the pull could close
    """
)


def _batch(files: dict[str, bytes]) -> bytes:
    """`files` as the body of a batch on the wire."""
    return b"".join(
        b"".join(wire.file_frame(path, 0o640, MTIME, hashlib.sha256(data).digest(), data))
        for path, data in files.items()
    )


@pytest.mark.parametrize("where", ["threads", "landers"])
def test_a_pull_killed_mid_way_leaves_only_a_hidden_stage_the_next_pull_removes(
    tmp_path: Path, where: str
) -> None:
    """Landed in the operator's threads or in its landing processes: the operator killed,
    the landers go with it (their pipe ends), and what they landed stays unseen."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "old.txt").write_bytes(b"synced earlier")
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_MID_PULL, str(tmp_path), where],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        said, *landers = proc.stdout.readline().split()
        assert said == "landed" and bool(landers) == (where == "landers")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
    for pid in landers:
        eventually(lambda pid=int(pid): not _alive(pid), 30, f"lander {pid} gone")
    assert _visible(tmp_path) == {"run", "run/old.txt", "run/a.txt"}  # whole, by rename
    assert len(_staged(tmp_path)) == 1  # run/deep waits there, unseen
    listed = {**TREE, "run/old.txt": b"synced earlier"}
    listing = [Entry(p, "file", len(d), 0o640, MTIME) for p, d in listed.items()]
    assert reconcile(tmp_path, listing) == []  # the stage goes, unnamed: it was no output
    assert _staged(tmp_path) == [] and _visible(tmp_path) == {"run", "run/old.txt", "run/a.txt"}


def test_a_landing_dir_holding_only_a_cut_pulls_leftovers_holds_no_outputs(
    tmp_path: Path,
) -> None:
    """`swjob runs` and a next attempt's carried outputs ask this: a killed pull's stage or
    temporary file is not an output, and a pushed-on landing dir leaves them out."""
    assert not holds_outputs(tmp_path / "absent")
    receiver = Receiver(tmp_path, hash_chunked=True, per_file=True, staged=True)
    receiver._apply_job(_records({"run/deep/b.txt": b"b"}))  # never closed: as if killed
    (tmp_path / ".top.txt.swjob-tmp").write_bytes(b"half of it")
    assert not holds_outputs(tmp_path)
    walked = walk_tree(tmp_path, IN_FLIGHT_EXCLUDES)
    assert walked.entries == []
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / ".model.bin.swjob-part").write_bytes(b"a chunk")
    (tmp_path / "metrics.json").write_text("{}")
    assert holds_outputs(tmp_path)
    walked = walk_tree(tmp_path, IN_FLIGHT_EXCLUDES)
    assert sorted(e.path for e in walked.entries) == ["ckpt", "metrics.json"]
