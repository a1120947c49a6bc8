"""One packer at a time reads a run of small files (agent/transfer/sender.py `_SMALL_READS`):
two reading at once handed the GIL between them at every syscall."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent.transfer import sender


def test_two_packers_never_read_small_files_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(40):
        (tmp_path / f"f{i}").write_bytes(b"x" * i)
        os.utime(tmp_path / f"f{i}", (1e9, 1e9))  # not hot: no packer waits for it to settle
    reading, most = [0], [0]
    lock = threading.Lock()
    real = sender._small_record

    def counted(*args: object) -> list[bytes]:
        with lock:
            reading[0] += 1
            most[0] = max(most[0], reading[0])
        time.sleep(0.001)  # long enough for the other packer to try
        try:
            return real(*args)  # type: ignore[arg-type]
        finally:
            with lock:
                reading[0] -= 1

    monkeypatch.setattr(sender, "_small_record", counted)
    runs = [[["file", f"f{i}"] for i in range(start, start + 20)] for start in (0, 20)]
    with ThreadPoolExecutor(2) as pool:
        packets = list(pool.map(lambda items: sender.build_packet(tmp_path, items, 0), runs))
    assert most[0] == 1
    assert [packet.files for packet, _ in packets] == [20, 20]


def test_a_packer_waiting_for_a_hot_file_lets_the_others_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held_while_sleeping = []
    monkeypatch.setattr(
        sender.time, "sleep", lambda s: held_while_sleeping.append(sender._SMALL_READS.locked())
    )
    with sender._SMALL_READS:
        sender._reading.small = True
        try:
            sender._settle()
        finally:
            sender._reading.small = False
    sender._settle()  # outside a run of small reads (a chunk): just waits
    assert held_while_sleeping == [False, False]
    assert not sender._SMALL_READS.locked()


def test_a_hot_small_file_is_still_read_twice_and_sent(tmp_path: Path) -> None:
    (tmp_path / "hot").write_bytes(b"just written")  # modified now: settles first
    packet, _ = sender.build_packet(tmp_path, [["file", "hot"]], 0)
    assert packet.files == 1 and not packet.skipped
    assert not sender._SMALL_READS.locked()
