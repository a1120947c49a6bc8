"""A long transfer's batches land in helper processes (agent/transfer/landproc.py) as in
threads: verified, named safely, never outside the root; what landed is known to the
caller (the agent for a push, the operator for a pull: its stage, its room on the disk)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from agent.ownpython import own_python
from agent.transfer import TransferError, UnsafePath, landproc, wire
from agent.transfer.errors import WireError
from agent.transfer.receiver import Receiver
from agent.transfer.space import free_bytes
from tests.support.bytestream import BytesStream
from tests.support.disks import tmpfs
from tests.support.landers import handed_to_landers
from tests.support.waiting import eventually

MTIME = 1_000_000_000_000_000_000


def _file(path: str, data: bytes, mode: int = 0o644, digest: bytes | None = None) -> bytes:
    return b"".join(
        wire.file_frame(path, mode, MTIME, digest or hashlib.sha256(data).digest(), data)
    )


async def _push(receiver: Receiver, *batches: bytes) -> None:
    body = b"".join(wire.frame(wire.BATCH, batch) for batch in batches)
    reader = wire.FrameReader(BytesStream(body + wire.record({"t": "end"})))
    await receiver.receive(reader, lambda n, f, c: None)


@pytest.mark.parametrize(
    ("name", "kind"),
    [("UnsafePath", UnsafePath), ("WireError", WireError), ("TransferError", TransferError)],
)
def test_a_landers_error_comes_back_as_its_own_class(name: str, kind: type) -> None:
    error = landproc.error_of(name, "refused 'x'")
    assert type(error) is kind and str(error) == "refused 'x'"


def test_a_landers_unexpected_error_ends_the_transfer_naming_it() -> None:
    error = landproc.error_of("MemoryError", "out of memory")
    assert isinstance(error, TransferError) and "MemoryError: out of memory" in str(error)


async def test_a_batch_lands_in_a_lander_verified_with_modes_and_mtimes(tmp_path: Path) -> None:
    files = {f"d{i % 3}/f{i}": os.urandom(i * 37 % 3000) for i in range(60)}
    batch = wire.record({"t": "dir", "p": "d0", "m": 0o750})
    batch += b"".join(
        _file(p, data, 0o600 if i % 2 else 0o755) for i, (p, data) in enumerate(files.items())
    )
    batch += wire.record({"t": "skip", "p": "gone", "why": "vanished before it could be read"})
    receiver = Receiver(tmp_path, in_place=True, landers_after=0)
    await _push(receiver, batch)
    receiver.close()
    assert set(receiver.verified) == set(files)
    assert receiver.failed == {"gone": "vanished before it could be read"}
    for i, (path, data) in enumerate(files.items()):
        st = (tmp_path / path).stat()
        assert (tmp_path / path).read_bytes() == data and st.st_mtime_ns == MTIME
        assert st.st_mode & 0o777 == (0o600 if i % 2 else 0o755)
        assert receiver.verified[path].sha256 == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "d0").stat().st_mode & 0o777 == 0o750
    assert landproc.pids()  # the batch did go to a lander


@pytest.mark.parametrize(
    ("batch", "error", "match"),
    [
        (_file("ok", b"ok") + _file("../evil", b"x"), UnsafePath, "refused"),
        (_file("ok", b"ok") + _file("planted/x", b"x"), UnsafePath, "not a real directory"),
        (_file("ok", b"ok") + _file("bad", b"x", digest=b"\0" * 32), TransferError, "'bad'"),
    ],
)
async def test_a_hostile_batch_is_refused_and_what_landed_before_it_is_known(
    tmp_path: Path, batch: bytes, error: type, match: str
) -> None:
    root = tmp_path / "work"
    root.mkdir()
    os.symlink(tmp_path, root / "planted")
    receiver = Receiver(root, in_place=True, landers_after=0)
    with pytest.raises(error, match=match):
        await _push(receiver, batch)
    receiver.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert sorted(p.name for p in root.iterdir()) == ["ok", "planted"]
    assert set(receiver.verified) == {"ok"}  # resume sends only the rest


async def test_a_link_made_in_a_lander_is_checked_when_the_push_closes(tmp_path: Path) -> None:
    """`d -> .` makes `e -> d/d/../..` leave the root: only known once both landed."""
    batch = wire.record({"t": "link", "p": "e", "to": "d/d/../.."})
    batch += wire.record({"t": "link", "p": "d", "to": "."})
    receiver = Receiver(tmp_path, in_place=True, landers_after=0)
    await _push(receiver, batch)
    receiver.close()
    assert receiver.refused and not os.path.lexists(tmp_path / "e")


async def test_a_lander_that_died_is_replaced(tmp_path: Path) -> None:
    receiver = Receiver(tmp_path, in_place=True, landers_after=0)
    await _push(receiver, _file("first", b"1"))
    dead = landproc.pids()
    for pid in dead:  # the landers this test's process started
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    await _push(receiver, _file("second", b"2"))
    receiver.close()
    assert set(receiver.verified) == {"first", "second"}
    assert (tmp_path / "second").read_bytes() == b"2"
    assert not set(landproc.pids()) & set(dead)


def test_a_lander_dying_under_a_batch_fails_it() -> None:
    lander = landproc._Lander()
    os.kill(lander.popen.pid, signal.SIGKILL)  # ours: started just above
    request = landproc.REQUEST.pack(1, 0, wire.BATCH, landproc.IN_PLACE, 1, 0, 0) + b"/"
    with pytest.raises(landproc.Lost, match="landing process"):
        lander.land(request, b"", lambda landed, failed, links, new: None)
    assert lander.dead
    lander.popen.wait()
    lander.thread.shutdown()


async def test_landers_end_once_idle_and_start_again_for_the_next_push(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a push is over the agent keeps no process of its own beside a step's."""
    _retire_every_lander()  # earlier tests', armed with the longer wait
    monkeypatch.setattr(landproc, "IDLE_S", 0.2)
    receiver = Receiver(tmp_path, in_place=True, landers_after=0)
    await _push(receiver, _file("first", b"1"))
    started = landproc.pids()

    def gone() -> bool:  # out of the pool, then ended and reaped (no zombie left)
        return not landproc.pids() and not any(psutil.pid_exists(pid) for pid in started)

    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert gone()
    await _push(receiver, _file("second", b"2"))
    receiver.close()
    assert set(receiver.verified) == {"first", "second"}


async def test_a_short_push_starts_no_lander_and_a_long_one_lands_its_later_batches_there(
    tmp_path: Path,
) -> None:
    """A workspace of a batch or two (code, configs) costs no process start."""
    _retire_every_lander()
    receiver = Receiver(tmp_path, in_place=True, landers_after=3)
    with handed_to_landers() as handed:
        await _push(receiver, _file("one", b"1"))
        assert not landproc.pids()  # one batch: in the writer threads
        await _push(receiver, _file("two", b"2"), _file("three", b"3"))
        assert receiver._warming is not None  # the second batch started them
        await receiver._warming
        started = landproc.pids()
        assert started and not handed  # the first three batches landed in the threads
        await _push(receiver, _file("four", b"4"))
    assert len(handed) == 1
    receiver.close()
    assert set(receiver.verified) == {"one", "two", "three", "four"}
    assert (tmp_path / "four").read_bytes() == b"4"
    assert set(landproc.pids()) == set(started)


async def test_a_pulls_batches_land_in_landers_unseen_until_the_stage_is_published(
    tmp_path: Path,
) -> None:
    """Outputs (staged, each file on its own): new directories are made in the caller's
    stage and placed whole at close; a file that fails is named, the others land."""
    root = tmp_path / "outputs"
    (root / "old").mkdir(parents=True)  # a repeated pull: this directory is already there
    files = {f"new{i % 2}/sub/f{i}": os.urandom(i * 53 % 2000) for i in range(40)}
    files["old/kept"] = b"into a directory the root holds"
    batch = b"".join(_file(p, data) for p, data in files.items())
    batch += _file("new0/bad", b"x", digest=b"\0" * 32)
    receiver = Receiver(root, hash_chunked=True, per_file=True, staged=True, landers_after=0)
    with handed_to_landers() as handed:
        await _push(receiver, batch)
    assert len(handed) == 1  # the batch did go to a lander
    stage = receiver._lander.stage
    assert stage is not None and Path(stage, "new1", "sub").is_dir()
    assert sorted(p.name for p in root.iterdir()) == sorted(["old", Path(stage).name])
    receiver.close()
    assert sorted(p.name for p in root.iterdir()) == ["new0", "new1", "old"]
    assert set(receiver.verified) == set(files)
    assert receiver.failed["new0/bad"].startswith("verification failed")
    for path, data in files.items():
        assert (root / path).read_bytes() == data
        assert receiver.verified[path].sha256 == hashlib.sha256(data).hexdigest()
    assert not Path(stage).exists()


async def test_a_dead_landers_half_written_file_is_never_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed under a batch (the OOM killer, a kill by pid), a lander may leave a file half
    written in the stage under its own name: it never reaches the outputs."""
    root = tmp_path / "outputs"
    root.mkdir()
    receiver = Receiver(root, hash_chunked=True, per_file=True, staged=True, landers_after=0)
    await _push(receiver, _file("new/whole", b"verified"))
    stage = Path(receiver._lander.stage or "")
    (stage / "new" / "half").write_bytes(b"cut short")  # as the dying lander left it
    land = landproc._Lander.land

    def killed_under_it(self: landproc._Lander, *args: object) -> object:
        os.kill(self.popen.pid, signal.SIGKILL)  # ours: the pool's lander, by its pid
        self.popen.wait()
        return land(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(landproc._Lander, "land", killed_under_it)
    with pytest.raises(landproc.Lost):
        await _push(receiver, _file("new/half", b"never landed whole"))
    receiver.close(discard_partials=True)
    assert sorted(p.name for p in (root / "new").iterdir()) == ["whole"]
    assert set(receiver.verified) == {"new/whole"}
    assert receiver._lander.made_links  # what the dead one made is unknown: links checked


async def test_a_landers_room_check_counts_what_the_operator_promised(tmp_path: Path) -> None:
    """A large output landing in the operator's threads holds its bytes promised: a small
    file a lander lands beside it must not take them."""
    with tmpfs(tmp_path / "landing", "1m") as disk:
        receiver = Receiver(disk.path, per_file=True, staged=True, landers_after=0)
        assert receiver._space is not None
        receiver._space.admit("big.bin", free_bytes(disk.path) - (16 << 10))
        with handed_to_landers() as handed:
            batch = _file("small/fits", b"x" * 1024) + _file("small/not", b"y" * 65536)
            await _push(receiver, batch)
        receiver.close()
        assert len(handed) == 1 and handed[0].reserve > 0
        assert set(receiver.verified) == {"small/fits"}
        assert receiver.failed["small/not"].startswith("refused: needs 64.0 KiB")
        assert not (disk.path / "small" / "not").exists()


@pytest.mark.parametrize("landers_after", [None, 0], ids=["threads", "landers"])
async def test_a_chunk_inside_a_batch_is_refused(tmp_path: Path, landers_after: int | None) -> None:
    """A chunk travels alone, where it is checked (and hashed whole, for outputs) as one:
    a hostile node hiding one in a batch would have it landed with neither."""
    chunk = wire.record({"t": "chunk", "p": "c", "s": 3, "i": 0, "n": 3, "c": 0, "mt": 0})
    batch = _file("ok", b"ok") + chunk + wire.frame(wire.DATA, b"abc")
    receiver = Receiver(tmp_path, hash_chunked=True, per_file=True, landers_after=landers_after)
    with pytest.raises(WireError, match="a chunk of 'c' inside a batch"):
        await _push(receiver, batch)
    receiver.close()
    assert not (tmp_path / "c").exists()


async def test_landers_that_cannot_start_leave_the_transfer_in_its_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lander that cannot even import (a broken environment) must not fail every long
    transfer: warming says so, and the batches land in the writer threads."""
    _retire_every_lander()
    monkeypatch.setattr(landproc, "_START", "raise SystemExit(3)")
    receiver = Receiver(tmp_path, in_place=True, landers_after=2)
    with handed_to_landers() as handed:
        await _push(receiver, _file("one", b"1"), _file("two", b"2"))
        assert receiver._warming is not None
        with pytest.raises(landproc.Lost, match="ended as it started"):
            await receiver._warming
        await _push(receiver, _file("three", b"3"), _file("four", b"4"))
    receiver.close()
    assert not handed and set(receiver.verified) == {"one", "two", "three", "four"}
    _retire_every_lander()


def _retire_every_lander() -> None:
    with landproc._pool_lock:
        for lander in list(landproc._pool):
            landproc._pool.remove(lander)
            lander.retire()


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc/<pid>/environ")
def test_a_lander_holds_none_of_the_nodes_or_operators_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job runs as the agent's user and may read a lander's environment; a lander
    (unlike an agent that could not move its secrets to a file) needs none of them, nor
    do the operator's, which would otherwise carry its provider keys."""
    monkeypatch.setenv("SWJOB_JOIN_TOKEN", "join-token-of-the-test")
    monkeypatch.setenv("CONTAINER_API_KEY", "container-key-of-the-test")
    monkeypatch.setenv("VAST_API_KEY", "vast-key-of-the-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sink-key-of-the-test")
    monkeypatch.setenv("LC_CTYPE", "C.UTF-8")
    monkeypatch.setenv("LC_SMUGGLED", "of-the-test")  # a name ssh's AcceptEnv LC_* lets in
    monkeypatch.setenv("PYTHONPATH", "/nonexistent-swjob-test")
    lander = landproc._Lander()  # not the pool's: an earlier test's may still be starting
    try:
        proc = Path(f"/proc/{lander.popen.pid}")
        eventually(lambda: (proc / "cmdline").read_bytes(), 10, "its exec laid out")
        environ = (proc / "environ").read_bytes()
        assert b"of-the-test" not in environ
        assert b"LC_CTYPE=C.UTF-8" in environ.split(b"\0")  # names are encoded by it
        assert b"PYTHONPATH=/nonexistent-swjob-test" in environ.split(b"\0")  # its imports
        assert b"-P" in (proc / "cmdline").read_bytes().split(b"\0")
    finally:
        lander.retire()


def test_a_lander_whose_parent_is_gone_ends_quietly(tmp_path: Path) -> None:
    """An operator killed -9 under a pull's batch: its lander's answer has no reader. It
    printed a BrokenPipeError traceback into the stderr it shares with the user's shell or
    log; it now ends without a word."""
    lander = subprocess.Popen(
        own_python(landproc._START),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=landproc._env(),
    )
    try:
        assert lander.stdout.read(len(landproc.READY)) == landproc.READY  # type: ignore[union-attr]
        lander.stdout.close()  # type: ignore[union-attr]  # the parent is gone
        root, body = os.fsencode(tmp_path), _file("a.txt", b"a")
        head = landproc.REQUEST.pack(1, 0, wire.BATCH, 0, len(root), 0, len(body))
        _, err = lander.communicate(head + root + body, timeout=30)
    finally:
        if lander.poll() is None:
            lander.kill()
            lander.wait()
    assert lander.returncode == 0 and err == b"", err.decode(errors="replace")
