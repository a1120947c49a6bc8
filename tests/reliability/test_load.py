"""Load: 32 jobs submitted at once on the local pool. The pool's max_nodes (4) is
honoured, the rest wait in PENDING, and every run reaches the terminal state its exit code
decides, with its complete log and its output."""

from __future__ import annotations

import json

import pytest

from engine.jobs.pools import BUILTIN_LOCAL
from tests.support.engines import engine_with
from tests.support.load import LINES, load_jobs, run_load

pytestmark = [pytest.mark.timeout(120)]

JOBS = 32


async def test_32_jobs_at_once_respect_max_nodes_and_all_finish(tmp_path, record_fault) -> None:
    jobs = load_jobs(tmp_path / "projects", JOBS)
    async with engine_with(tmp_path / "runs") as engine:
        result = await run_load(engine, jobs)
    assert result.most_nodes == BUILTIN_LOCAL.max_nodes  # used fully, never exceeded
    assert result.most_pending >= JOBS - BUILTIN_LOCAL.max_nodes
    for i, view in enumerate(sorted(result.views, key=lambda v: v.job_name)):
        assert view.job_name == f"load{i:02d}"
        expected = ("COMPLETED", 0, None) if i % 2 == 0 else ("FAILED", 1, "run exited with code 1")
        assert (view.state, view.exit_code, view.reason) == expected
        log = (view.run_dir / "logs" / "run.log").read_text().splitlines()
        assert log == [f"job {i} line {k}" for k in range(1, LINES + 1)]
        assert (view.run_dir / "outputs" / "result.txt").read_text() == f"input of job {i}\n"
        summary = json.loads((view.run_dir / "run.json").read_text())
        assert summary["state"] == view.state and summary["missing_outputs"] == []
    outcome = (
        f"all {JOBS} terminal as their exit codes say in {result.wall_s:.1f} s; "
        f"≤ {result.most_nodes} nodes at once, up to {result.most_pending} PENDING"
    )
    record_fault(f"load: {JOBS} jobs submitted at once", None, outcome)
