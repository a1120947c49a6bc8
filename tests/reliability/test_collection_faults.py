"""The exit code decides: a job that exits 0 is COMPLETED even when some outputs cannot be
collected; they are named with their reasons (CLI, manifest.json, run.json), the rest lands.

A real `swjob run` on the local pool (real agent, real iroh), its runs directory on a real
16 MiB tmpfs: a 24 MiB output cannot fit and is refused before a byte of it lands; a fifo
among the outputs is refused by the node (as root, chmod 000 would not stop a read).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from tests.support.cli import swjob
from tests.support.disks import tmpfs
from tests.support.waiting import eventually

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


def test_outputs_that_landed_whole_are_named_when_the_manifest_cannot_be_written(
    tmp_path: Path, clis
) -> None:
    """Every output lands, verified, then manifest.json cannot be written (here a directory
    stands in its way; a full disk does the same): the run said "outputs not collected"
    and listed every output as missing, though each lay whole in outputs/. Now the landed
    ones are named as landed, with their SHA-256 in run.json, and the one that never
    existed on the node is the only one missing."""
    release = tmp_path / "release"
    (tmp_path / "job.toml").write_text(
        f'[job]\nname = "nomanifest"\nrun = "echo one > a.txt; echo two > b.txt; '
        f'echo waiting; while [ ! -e {release} ]; do sleep 0.1; done"\n'
        'outputs = ["a.txt", "b.txt", "never.txt"]\n'
    )
    cli = clis("run", "job.toml", cwd=tmp_path)
    eventually(lambda: cli.has_printed("run | waiting"), 60, "the job running")
    [run_dir] = (tmp_path / "swjob-runs" / "nomanifest").iterdir()
    (run_dir / "manifest.json").mkdir()  # in the way of the manifest's rename
    release.touch()
    assert cli.wait(60) == 0, cli.output()
    out = cli.output()
    why = f"cannot write {run_dir}/manifest.json: Is a directory"
    said = (
        f"outputs landed without a manifest ({why}): 2 of 2 files landed whole, "
        "verified by SHA-256: a.txt, b.txt (listed in run.json)"
    )
    assert out.splitlines()[-2:] == ["missing outputs: never.txt", said], out
    assert "outputs not collected" not in out, out
    assert (run_dir / "outputs" / "a.txt").read_text() == "one\n"
    record = json.loads((run_dir / "run.json").read_text())
    assert record["state"] == "COMPLETED" and record["missing_outputs"] == ["never.txt"]
    assert record["outputs"]["verified"] == {
        "a.txt": hashlib.sha256(b"one\n").hexdigest(),
        "b.txt": hashlib.sha256(b"two\n").hexdigest(),
    }
