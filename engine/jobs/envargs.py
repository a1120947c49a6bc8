"""`swjob run --env NAME` and `--env NAME=VALUE`: a job's env given on the command line.

`--env HF_TOKEN` takes the value from the local environment, so a secret need not be
written into the job file; `--env SEED=7` sets it outright. Either is a secret like any
job env value (masked wherever swjob shows text), overrides the file's, and is checked
by the job file's rules. Values are never stored: a swjob process that adopts the run
after this one died takes them from its own environment again, checked against a digest
the run keeps, and fails the run with the reason when they are not there (`restore`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

from engine.jobs.jobspec import JobFileError, JobSpec, _env_name, _env_total, _env_value
from engine.jobs.tomlload import shown


def with_env(job: JobSpec, given: list[str], environ: Mapping[str, str]) -> JobSpec:
    """`job` with each `NAME` (from `environ`) or `NAME=VALUE` of `given` in its env."""
    env = dict(job.env)
    names = list(job.env_args)
    for item in given:
        name, sep, value = item.partition("=")
        flag = f"--env {shown(name)}"
        if not sep:
            if name not in environ:
                raise JobFileError(None, "not set in your environment", field=flag)
            value = environ[name]
        try:
            _env_name(name)
            _env_value(value)
        except ValueError as exc:
            raise JobFileError(None, str(exc), field=flag) from None
        env[name] = value
        names.append(name)
    try:
        _env_total(env)
    except ValueError as exc:
        raise JobFileError(None, str(exc), field="--env") from None
    return dataclasses.replace(job, env=env, env_args=tuple(dict.fromkeys(names)))


def record(job: JobSpec) -> dict[str, Any] | None:
    """What the run keeps of its `--env` values: their names and one digest, never them."""
    if not job.env_args:
        return None
    return {"names": list(job.env_args), "sha256": _digest(job.env, job.env_args)}


def restore(job: JobSpec, kept: Mapping[str, Any] | None, environ: Mapping[str, str]) -> JobSpec:
    """The job read again from its file with its `--env` values taken from `environ` again;
    JobFileError when one is missing here, or differs from what the run was given."""
    if not kept:
        return job
    names = [str(n) for n in kept.get("names", [])]
    missing = [n for n in names if n not in environ]
    if missing:
        raise JobFileError(None, f"--env {', '.join(missing)} not set in this environment")
    env = {**job.env, **{n: environ[n] for n in names}}
    if _digest(env, names) != kept.get("sha256"):
        raise JobFileError(None, "--env values here differ from the ones the run was given")
    return dataclasses.replace(job, env=env, env_args=tuple(names))


def _digest(env: Mapping[str, str], names: Any) -> str:
    pairs = "\0".join(f"{n}={env[n]}" for n in sorted(names))
    return hashlib.sha256(pairs.encode()).hexdigest()
