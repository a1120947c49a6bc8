"""Job files as a user writes them: TOML on disk, loaded by the engine's own loader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import tomlkit

from engine.jobs.jobspec import JobSpec, load_job

__all__ = ["RESUMING", "make_job", "write_job"]

RESUMING = (
    'if [ -e ck/last.txt ]; then echo "resumed from $(cat ck/last.txt)" | tee result.txt;'
    " else mkdir -p ck && echo epoch-3 > ck/last.txt && sleep 60; fi"
)
"""A job that resumes from its checkpoint (outputs `ck/` and `result.txt`): run afresh it
writes ck/last.txt and runs on (for a test to end its node); given that checkpoint it says
what it resumed from and ends."""


def write_job(root: Path, **fields: object) -> Path:
    """`root`/job.toml with `fields` as its [job] table (name "t" unless given), the
    folder made if need be; returns the job file (unloaded: a real `swjob` reads it)."""
    root.mkdir(parents=True, exist_ok=True)
    doc = tomlkit.document()
    doc["job"] = {"name": "t", **fields}
    job_file = root / "job.toml"
    job_file.write_text(tomlkit.dumps(doc))
    return job_file


@pytest.fixture
def make_job(tmp_path: Path) -> Callable[..., JobSpec]:
    """`make_job(files, folder="project", **fields)`: write `files` and a job.toml with
    `fields` (name "t" unless given) into `folder` under the test's tmp dir, and load it."""

    def make(
        files: dict[str, str] | None = None, *, folder: str = "project", **fields: object
    ) -> JobSpec:
        root = tmp_path / folder
        root.mkdir(exist_ok=True)
        for rel, text in (files or {}).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return load_job(write_job(root, **fields))

    return make
