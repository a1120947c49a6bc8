"""Two consoles append their warnings to the same `swjob-tui.log` (engine/logsetup.py):
every line whole, none lost or doubled, across rotations each of them makes."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from engine.state.paths import state_dir
from tests.support.processes import reap

LINES = 400
MAX_BYTES = 4096
BACKUPS = 60  # every line is kept: what rotation drops is not what this test looks at
WRITER = """
import logging, sys, time
from pathlib import Path
from engine import logsetup

logsetup.MAX_BYTES, logsetup.BACKUPS = int(sys.argv[2]), int(sys.argv[3])
logsetup.log_to_file("swjob-tui.log")
log = logging.getLogger("swjob.engine")
tag, go = sys.argv[1], Path(sys.argv[4])
while not go.exists():
    time.sleep(0.001)
for n in range(int(sys.argv[5])):
    log.warning("%s %05d %s end", tag, n, tag * (20 + n % 50))
"""
LINE = re.compile(r"^\S+ \S+ pid \d+ WARNING swjob\.engine: ([ab]) (\d{5}) ([ab]+) end$")


def test_two_consoles_rotating_one_log_keep_every_line_whole(tmp_path: Path) -> None:
    go = tmp_path / "go"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, tag, str(MAX_BYTES), str(BACKUPS), str(go), str(LINES)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in "ab"
    ]
    try:
        time.sleep(0.5)  # both set up: their handlers hold the same file open
        go.touch()
        for writer in writers:
            assert writer.wait(60) == 0, writer.stderr.read() if writer.stderr else ""
            assert writer.stderr is not None and writer.stderr.read() == ""
    finally:
        for writer in writers:
            reap(writer)
    files = sorted(state_dir().glob("swjob-tui.log*"))
    assert len(files) > 2, "no rotation happened: the test proves nothing"
    assert len(files) <= BACKUPS + 1
    seen: dict[str, list[int]] = {"a": [], "b": []}
    for file in files:
        assert file.stat().st_mode & 0o777 == 0o600, file
        assert file.stat().st_size <= MAX_BYTES, f"{file.name}: {file.stat().st_size} bytes"
        for line in file.read_text().splitlines():
            whole = LINE.match(line)
            assert whole, f"{file.name}: not a whole line: {line!r}"
            tag, n, pad = whole.groups()
            assert pad == tag * (20 + int(n) % 50), f"{file.name}: torn: {line!r}"
            seen[tag].append(int(n))
    for tag, numbers in seen.items():
        assert sorted(numbers) == list(range(LINES)), f"{tag}: lost or doubled lines"
