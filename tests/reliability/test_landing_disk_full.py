"""The operator's own disk fills while outputs come back: the landing dir (`--runs-dir`)
on a real 80 MiB tmpfs, filled to its last byte by another program once collection has
started. Outputs, manifest.json, events.jsonl and run.json then all meet ENOSPC.

The run must still end, its node torn down, in bounds: the engine's records failing is
no reason to stop driving the run (a stuck operator keeps a rented node billing). What
did not land is not presented as landed, and the disk's error is said.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.disks import tmpfs
from tests.support.processes import pid_alive
from tests.support.runs import agent_pid, only_run_dir
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

Start = Callable[..., Cli]
SIZE = 20_000_000
JOB = f"""[job]
name = "fill"
run = "for i in 1 2 3; do head -c {SIZE} /dev/urandom > o$i.bin; done; echo made"
workspace = {{ workdir = "." }}
outputs = ["o1.bin", "o2.bin", "o3.bin"]
"""


def not_collected(run_dir: Path) -> str:
    """The line that says why, naming where the outputs could not land."""
    return f"outputs not collected: cannot write {run_dir}/manifest.json: No space left on device"


def test_a_landing_disk_filled_mid_collection_ends_the_run_and_tears_the_node_down(
    tmp_path: Path, clis: Start, record_fault: Callable[..., None]
) -> None:
    project = tmp_path / "fill"
    project.mkdir()
    (project / "job.toml").write_text(JOB)
    runs = tmp_path / "runs"
    with tmpfs(runs, "80m") as disk:
        cli = clis("run", str(project / "job.toml"), "--runs-dir", str(runs), cwd=tmp_path)
        run_dir = only_run_dir(runs, "fill")
        node = agent_pid(run_dir)
        eventually(lambda: cli.has_printed("→ CollectOutputs"), 60, "collection started")
        disk.fill()
        try:
            code = cli.wait(60)
        finally:
            disk.free_up()
        out = cli.output()
        assert "No space left on device" in out, out
        assert "Task exception was never retrieved" not in out, out
        eventually(lambda: not pid_alive(node), 30, "the node torn down")
        landed = sorted((run_dir / "outputs").rglob("*")) if (run_dir / "outputs").exists() else []
        for path in landed:  # whatever is under its final name is whole
            assert path.stat().st_size == SIZE, (path, path.stat().st_size)
        scratch = [p for p in run_dir.rglob("*") if "swjob-" in p.name or p.suffix == ".tmp"]
        assert not scratch, scratch
        manifest_file = run_dir / "manifest.json"
        written = manifest_file.exists() and manifest_file.stat().st_size > 0
        if written:
            manifest = json.loads(manifest_file.read_text())
            verified = {f["path"] for f in manifest["files"] if f["verified"]}
            assert verified <= {p.name for p in landed}, manifest
        assert code == 0 and "internal error" not in out, out  # the exit code decides
        if len(landed) < 3:  # never as if every output landed
            # the manifest meets the full disk, or finds room once a refused output's part
            # file is gone (the fill's timing decides): either way what is missing is said
            if written:
                assert f"{3 - len(landed)} of 3 files did not land" in out, out
            elif not landed:
                assert out.endswith(not_collected(run_dir) + "\n"), out
            else:  # those that landed whole named, never as if every one did
                names = ", ".join(sorted(p.name for p in landed))
                said = f"{len(landed)} of 3 files landed whole, verified by SHA-256: {names} ("
                assert said in out.splitlines()[-1], out
    record_fault(
        "operator's landing disk filled by another program mid-collection",
        None,
        f"run ended (exit {code}), node torn down, {len(landed)} of 3 outputs landed whole",
    )


def test_a_landing_disk_full_from_the_start_still_ends_the_run(
    tmp_path: Path, clis: Start, record_fault: Callable[..., None]
) -> None:
    """Full before the run starts: its step log's writes fail too, and closing that log
    raised at the run's end, so its verdict was never published (the operator hung after
    `NodeTornDown`). The run ends, says what was not written, and its node is gone.

    The job exited 0, so it is COMPLETED: its outputs not being collected is said, never
    turned into an internal error that fails it (it was "FAILED — internal error: OSError")."""
    project = tmp_path / "full"
    project.mkdir()
    (project / "job.toml").write_text(
        '[job]\nname = "full"\nrun = "echo hi; echo hi > out.txt"\noutputs = ["out.txt"]\n'
    )
    runs = tmp_path / "runs"
    with tmpfs(runs, "1m") as disk:
        disk.fill()
        cli = clis("run", str(project / "job.toml"), "--runs-dir", str(runs), cwd=tmp_path)
        try:
            code = cli.wait(30)
        finally:
            disk.free_up()
        run_dir = only_run_dir(runs, "full")
        manifest = (run_dir / "manifest.json").exists()
    out = cli.output()
    assert code == 0 and "internal error" not in out, out
    assert "run | hi" in out and "logs/run.log is missing lines: [Errno 28]" in out, out
    final = ["COMPLETED exit code 0", "missing outputs: out.txt", not_collected(run_dir)]
    assert out.splitlines()[-3:] == final, out
    assert not manifest
    assert "Task exception was never retrieved" not in out, out
    record_fault("operator's landing disk full before the run", None, f"run ended (exit {code})")
