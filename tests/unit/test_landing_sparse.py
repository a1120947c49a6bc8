"""A chunk's zero blocks stay holes when it lands, and its data runs land byte-exact."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.transfer.landing import SPARSE_BLOCK, Lander

B = SPARSE_BLOCK


def _data_ranges(path: Path) -> list[tuple[int, int]]:
    """The (start, end) of every data extent, found with SEEK_DATA / SEEK_HOLE."""
    ranges, fd = [], os.open(path, os.O_RDONLY)
    try:
        pos, size = 0, os.fstat(fd).st_size
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: hole to the end
                break
            pos = os.lseek(fd, start, os.SEEK_HOLE)
            ranges.append((start, pos))
    finally:
        os.close(fd)
    return ranges


@pytest.mark.parametrize(
    ("layout", "tail"),
    [("DZDDZZD", B // 3), ("ZZZ", B // 2), ("DDD", 0), ("ZDZ", 0), ("D", 7)],
)
def test_zero_blocks_are_holes_and_data_lands_exactly(
    tmp_path: Path, layout: str, tail: int
) -> None:
    """Each `D` block is random, each `Z` block zeros; a short tail of random bytes follows
    when `tail` is set (a chunk's last, partial block)."""
    blocks = [os.urandom(B) if kind == "D" else bytes(B) for kind in layout]
    data = b"".join(blocks) + os.urandom(tail)
    offset = 3 * B  # a chunk lands at its offset in the `.part` file
    lander = Lander(tmp_path)
    fd = lander.open_part("f.bin", offset + len(data))
    try:
        written = Lander.write_at(fd, data, offset)
    finally:
        os.close(fd)
    part = tmp_path / ".f.bin.swjob-part"
    assert part.read_bytes()[offset:] == data
    assert written == layout.count("D") * B + tail
    expected, run = [], None
    for index, kind in enumerate(layout + ("D" if tail else "")):
        start = offset + index * B
        if kind == "D" and run is None:
            run = start
        if kind == "Z" and run is not None:
            expected.append((run, start))
            run = None
    if run is not None:
        expected.append((run, offset + len(data)))
    assert _data_ranges(part) == expected
