"""How a run's names and text are shown: with its job's secrets masked.

Secrets (the job's `env` values) are never stored by swjob, so for a run this engine
no longer drives they are read again from its job file, whose path the run index
keeps for recovery. A job file that is gone or no longer loads leaves nothing to mask
with; its outputs' names are then shown as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agent.redact import Redactor
from engine.jobs.jobspec import JobFileError, load_job

Mask = Callable[[str], str]


def mask_from_job_file(recovery: Mapping[str, Any] | None) -> Mask:
    """The masking a past run's job file gives (its `job_file` recovery fact)."""
    job_file = (recovery or {}).get("job_file")
    if not isinstance(job_file, str):
        return str
    try:
        return Redactor(load_job(Path(job_file)).secrets())
    except (JobFileError, OSError):
        return str
