"""Every benchmark runs once at a tiny size, so none rots unseen between the times someone
measures with it. Figures are not checked here (a loaded CI machine says nothing about
speed): only that each script runs to its end and prints its report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TINY = {
    "board_keys": ["-m", "tests.bench.board_keys", "--runs", "3", "--keys", "4"],
    "boot": ["-m", "tests.bench.boot", "--tiny"],
    "engine_load": [
        *("-m", "tests.bench.engine_load", "--jobs", "2", "--reps", "1", "--keys", "5"),
        *("--state-on", "tmp"),  # no loop mount: a CI machine may have no loop devices
    ],
    "hello": ["-m", "tests.bench.hello", "-n", "1", "--pause", "0"],
    "index_lock": ["-m", "tests.bench.index_lock", "-n", "1"],
    "iroh_floor": ["tests/bench/iroh_floor.py", "--mib", "4", "--streams", "1"],
    "loop_stall": ["tests/bench/loop_stall.py", "--mib", "1", "--lines", "2000"],
    "sink": ["-m", "tests.bench.sink", "--tiny"],
    "startup": ["-m", "tests.bench.startup", "-n", "1"],
    "table_draw": ["-m", "tests.bench.table_draw", "--runs", "2", "--reps", "1"],
    "teardown_stall": [
        "-m",
        "tests.bench.teardown_stall",
        "--files",
        "50",
        "--mib",
        "1",
        "--runs",
        "2",
    ],
    "transfer": ["tests/bench/transfer.py", "--tiny"],
    "tui_flood": ["tests/bench/tui_flood.py", "--lines", "2000", "--history", "3", "--board"],
    "warm": ["-m", "tests.bench.warm", "-n", "1", "--boot-delay", "0", "--tree-mb", "2"],
    "wire_bytes": [
        "tests/bench/wire_bytes.py",
        "--tree",
        "agent",
        "--levels",
        "1",
        "--streamed",
        "22",
    ],
}


def test_every_benchmark_has_a_tiny_run() -> None:
    scripts = {p.stem for p in (REPO / "tests" / "bench").glob("*.py") if p.stem != "__init__"}
    assert scripts == set(TINY)


@pytest.mark.parametrize("name", sorted(TINY))
def test_benchmark_runs_at_a_tiny_size(name: str) -> None:
    env = {**os.environ, "SWJOB_IROH_RELAY": "disabled", "SWJOB_IROH_BIND": "127.0.0.1:0"}
    out = subprocess.run(
        [sys.executable, *TINY[name]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip(), f"{name} printed no figures"
