"""Runs landing inside the job's own folder (the default `swjob-runs/` when swjob is started
there) are never pushed back to the node: neither the earlier runs nor the one being pushed."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import swjob

JOB = """[job]
name = "inside"
run = "ls -a; test ! -e {runs} && echo clean > clean.txt"
workspace = {{ workdir = "." }}
outputs = ["clean.txt"]
"""


def _run_twice_from_the_job_folder(tmp_path: Path, *runs_args: str, runs: str) -> None:
    (tmp_path / "job.toml").write_text(JOB.format(runs=runs))
    (tmp_path / "data.txt").write_text("kept\n")
    for _ in range(2):  # the second run finds the first one's landing dir in the workspace
        done = swjob("run", "job.toml", *runs_args, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "run | data.txt" in done.stdout  # the workspace itself was pushed
    landed = sorted((tmp_path / runs / "inside").glob("*/outputs/clean.txt"))
    assert len(landed) == 2

    planned = swjob("plan", "job.toml", *runs_args, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert "data.txt" in planned.stdout and runs.split("/")[0] not in planned.stdout


def test_default_runs_dir_in_the_workspace_is_not_pushed(tmp_path: Path) -> None:
    _run_twice_from_the_job_folder(tmp_path, runs="swjob-runs")


def test_a_runs_dir_deeper_in_the_workspace_is_not_pushed(tmp_path: Path) -> None:
    _run_twice_from_the_job_folder(tmp_path, "--runs-dir", "results/runs", runs="results/runs")
