"""Shared tools for the fault-injection tests: a run's summary, `swjob run` to its end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from engine.report.views import RunView

__all__ = ["run_json", "swjob_run"]


def run_json(view: RunView) -> dict:
    return json.loads((view.run_dir / "run.json").read_text())


def swjob_run(
    tmp_path: Path, job: Path, *args: str, umask: int = 0o022, **env: str
) -> tuple[int, str]:
    """`swjob run` as the user runs it (from a shell with `umask`); its exit code and
    everything it printed."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from engine.cli.main import main; sys.exit(main())",
         "run", str(job), "--runs-dir", str(tmp_path / "runs"), *args],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=60, umask=umask,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr
