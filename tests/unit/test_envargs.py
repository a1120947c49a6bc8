"""`swjob run --env`: values from the local environment or the flag, checked like the job
file's, and taken again from the environment by a process that adopts the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.jobs.envargs import record, restore, with_env
from engine.jobs.jobspec import JobFileError, load_job


@pytest.fixture
def job(tmp_path: Path):
    (tmp_path / "job.toml").write_text('[job]\nname = "j"\nrun = "true"\nenv = { A = "file" }\n')
    return load_job(tmp_path / "job.toml")


def test_names_come_from_the_environment_and_pairs_from_the_flag(job) -> None:
    given = with_env(job, ["TOKEN", "A=flag"], {"TOKEN": "s3cret"})
    assert given.env == {"A": "flag", "TOKEN": "s3cret"}
    assert given.secrets() == ["flag", "s3cret"]
    assert given.env_args == ("TOKEN", "A")


@pytest.mark.parametrize(
    ("arg", "said"),
    [
        ("MISSING", "--env MISSING: not set in your environment"),
        ("1BAD=x", "--env 1BAD: not a valid environment variable name"),
        ("NUL=a\0b", "--env NUL: value contains a NUL byte"),
    ],
)
def test_a_bad_env_arg_is_one_line_without_its_value(job, arg: str, said: str) -> None:
    with pytest.raises(JobFileError) as info:
        with_env(job, [arg], {})
    assert str(info.value).startswith(said)


def test_an_adopter_takes_the_values_from_its_environment_again(job) -> None:
    given = with_env(job, ["TOKEN"], {"TOKEN": "s3cret"})
    kept = record(given)
    assert kept is not None and "s3cret" not in str(kept)
    assert restore(job, kept, {"TOKEN": "s3cret"}).env["TOKEN"] == "s3cret"
    with pytest.raises(JobFileError, match="TOKEN not set in this environment"):
        restore(job, kept, {})
    with pytest.raises(JobFileError, match="differ from the ones the run was given"):
        restore(job, kept, {"TOKEN": "other"})
    assert record(job) is None and restore(job, None, {}) is job
