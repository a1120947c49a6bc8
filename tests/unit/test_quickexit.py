"""A quick exit keeps what the process wrote and its exit code, and skips the teardown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CODE = """
import atexit, logging, sys
from agent.quickexit import exit_now

log = logging.getLogger("probe")
log.addHandler(logging.FileHandler(sys.argv[1]))
log.addHandler(logging.StreamHandler(sys.stderr))
log.error("last log line")
atexit.register(lambda: print("interpreter teardown ran"))
print("buffered, no newline", end="")
exit_now(7)
"""


def test_output_and_logs_are_written_and_the_code_kept(tmp_path: Path) -> None:
    log_file = tmp_path / "probe.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout buffered
    done = subprocess.run(
        [sys.executable, "-c", CODE, str(log_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 7
    assert done.stdout == "buffered, no newline"  # and no teardown: its hook never ran
    assert done.stderr == "last log line\n"
    assert log_file.read_text() == "last log line\n"
