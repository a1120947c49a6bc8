"""The exit code decides: a job that exits 0 is COMPLETED even when some outputs cannot be
collected; they are named with their reasons (CLI, manifest.json, run.json), the rest lands.

A real `swjob run` on the local pool (real agent, real iroh), its runs directory on a real
16 MiB tmpfs: a 24 MiB output cannot fit and is refused before a byte of it lands; a fifo
among the outputs is refused by the node (as root, chmod 000 would not stop a read).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.cli import swjob
from tests.support.disks import tmpfs

pytestmark = [pytest.mark.timeout(120)]

JOB = """[job]
name = "partial"
run = "head -c 24M /dev/urandom > big.bin && mkfifo pipe && echo ok > small.txt"
outputs = ["big.bin", "small.txt", "pipe"]
"""


def test_exit_0_with_outputs_that_cannot_land_is_completed_and_says_so(
    tmp_path: Path, record_fault
) -> None:
    (tmp_path / "job.toml").write_text(JOB)
    with tmpfs(tmp_path / "swjob-runs", "16m"):
        started = time.monotonic()
        done = swjob("run", "job.toml", cwd=tmp_path, timeout=90)
        took = time.monotonic() - started
        assert done.returncode == 0, done.stdout + done.stderr
        assert "COMPLETED exit code 0" in done.stdout
        assert "warning: outputs incomplete: 2 of 3 files did not land" in done.stdout
        run_dir = next((tmp_path / "swjob-runs" / "partial").iterdir())
        assert (run_dir / "outputs" / "small.txt").read_text() == "ok\n"
        assert not (run_dir / "outputs" / "big.bin").exists()
        assert not [p for p in run_dir.rglob("*") if "swjob-" in p.name]
        manifest = json.loads((run_dir / "manifest.json").read_text())
        reasons = {e["path"]: e["reason"] for e in manifest["files"]}
        assert reasons["small.txt"] is None
        assert reasons["big.bin"].startswith("refused: needs 24.0 MiB, only ")
        assert manifest["complete"] is True and "fifo" in manifest["refused"][0]
        record = json.loads((run_dir / "run.json").read_text())
        assert record["outputs"]["not_landed"] == {"big.bin": reasons["big.bin"]}
    record_fault(
        "exit 0; one output larger than the operator's free disk, one a fifo",
        None,
        f"COMPLETED, CLI exit 0 with 'outputs incomplete: 2 of 3' ({took:.1f} s)",
        "the 2 outputs, named with reasons",
    )
