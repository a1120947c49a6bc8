"""Job files (spec §4): a `[job]` table with exactly name, run, setup, workspace, outputs, env.

A job says what to do, never where: anything else in the file is rejected by name,
so a stray `gpu = ...` is an error instead of silently ignored. Every value that
later becomes a directory name, a path on the node, a glob or an environment
variable is checked here, once, so the rest of the engine and the agent can trust
a JobSpec. `env` values are secrets: no message built here ever contains one.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.redact import Redactor
from engine.jobs.strict import Array, Before, Field, StrMap, Table, Text, check, first_problem
from engine.jobs.tomlload import (
    SAFE_NAME,
    SAFE_NAME_RULE,
    ConfigFileError,
    located_error,
    parse_toml,
    read_toml,
    shown,
    toml_type,
)

MAX_COMMAND_CHARS = 64 * 1024
MAX_PATTERNS = 1000
MAX_PATTERN_CHARS = 4096
MAX_ENV_VARS = 256
MAX_ENV_VALUE_BYTES = 64 * 1024
MAX_ENV_TOTAL_BYTES = 1 << 20

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")


class JobFileError(ConfigFileError):
    """A job file problem, one line: `<file>:<line>: <field>: <problem>`."""


def _safe_name(name: str) -> str:
    if not SAFE_NAME.fullmatch(name):
        raise ValueError(f"'{shown(name)}' is not a safe name: {SAFE_NAME_RULE}")
    return name


def _command(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    if "\0" in text:
        raise ValueError("contains a NUL byte")
    if len(text) > MAX_COMMAND_CHARS:
        raise ValueError(f"too long (over {MAX_COMMAND_CHARS // 1024} KiB)")
    return text


def _pattern_text(pattern: str) -> str:
    """Checks shared by outputs and excludes: one line, bounded, not empty."""
    if not pattern:
        raise ValueError("empty entry")
    if any(c in pattern for c in "\0\n\r"):
        raise ValueError(f"'{shown(pattern)}' contains a NUL or newline")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"'{shown(pattern)}' is too long (over {MAX_PATTERN_CHARS} chars)")
    return pattern


def _output(pattern: str) -> str:
    """A path or glob relative to the workdir that cannot escape it."""
    _pattern_text(pattern)
    if pattern.startswith("/"):
        raise ValueError(f"'{shown(pattern)}' is absolute; outputs are relative to the workdir")
    if ".." in pattern.split("/"):
        raise ValueError(f"'{shown(pattern)}' has a '..' segment; outputs stay in the workdir")
    return pattern


def _exclude(pattern: str) -> str:
    """A gitignore pattern that pathspec accepts (so the transfer walk cannot fail later)."""
    from pathspec import GitIgnoreSpec  # only a job with excludes pays for importing it

    _pattern_text(pattern)
    try:
        GitIgnoreSpec.from_lines([pattern])
    except ValueError:
        raise ValueError(f"'{shown(pattern)}' is not a valid gitignore pattern") from None
    return pattern


def _no_duplicates(items: list[str]) -> list[str]:
    seen: set[str] = set()
    for item in items:
        key = posixpath.normpath(item)
        if key in seen:
            raise ValueError(f"'{shown(item)}' is listed twice")
        seen.add(key)
    return items


def _env_name(name: str) -> str:
    if not _ENV_NAME.fullmatch(name):
        raise ValueError("not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    return name


def _env_value(value: str) -> str:
    """Never echo the value: it is a secret."""
    if "\0" in value:
        raise ValueError("value contains a NUL byte")
    if len(value.encode()) > MAX_ENV_VALUE_BYTES:
        raise ValueError(f"value too big (over {MAX_ENV_VALUE_BYTES // 1024} KiB)")
    return value


def _env_total(env: dict[str, str]) -> dict[str, str]:
    if sum(len(k.encode()) + len(v.encode()) for k, v in env.items()) > MAX_ENV_TOTAL_BYTES:
        raise ValueError(f"values too big in total (over {MAX_ENV_TOTAL_BYTES // 1024} KiB)")
    return env


def _workdir(value: object, ctx: Mapping[str, Any]) -> Path:
    """The workspace folder, absolute: a relative one is relative to the job file's folder
    (context `base`), not the cwd."""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {toml_type(value)}")
    if "\0" in value:
        raise ValueError("contains a NUL byte")
    path = Path(ctx["base"]) / Path(value).expanduser()
    try:
        path = path.resolve()
        is_dir, exists = path.is_dir(), path.exists()
    except OSError as exc:  # e.g. a name too long
        raise ValueError(f"'{shown(str(path))}' {exc.strerror}") from None
    except RuntimeError:  # Python 3.11's resolve() on a symlink loop
        raise ValueError(f"'{shown(str(path))}' is a symlink loop") from None
    if not is_dir:
        problem = "is not a directory" if exists else "does not exist"
        raise ValueError(f"'{shown(str(path), 512)}' {problem}")
    return path


@dataclass(frozen=True, kw_only=True)
class Workspace:
    """The tree pushed to the node; `workdir` is absolute."""

    workdir: Path
    exclude: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """A validated job plus the file it came from (absolute). Build one with `load_job` or
    `parse_job`: the constructor trusts its arguments."""

    name: str
    run: str
    setup: str | None = None
    workspace: Workspace | None = None
    outputs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict, repr=False)  # secrets
    source: Path
    env_args: tuple[str, ...] = ()  # env names given by `swjob run --env` (engine/jobs/envargs.py)
    params: dict[str, str] = field(default_factory=dict)
    """The env values added by `with_params` (a sweep's or a trial's parameters): kept with
    the run, so an adopter carries them on. Like every env value they are masked in logs
    (spec: env values are secrets; the node's agent masks them too)."""

    def secrets(self) -> list[str]:
        """The env values: what redaction must hide wherever text leaves a process."""
        return list(self.env.values())

    def with_params(self, params: Mapping[str, str]) -> JobSpec:
        """This job with `params` added to its env (over a job file value of the same
        name). Names and values are checked as the job file's are; ValueError says which."""
        for name, value in params.items():
            try:
                _env_name(name), _env_value(value)
            except ValueError as exc:
                raise ValueError(f"parameter {shown(name)}: {exc}") from None
        merged = _env_total({**self.env, **params})
        return dataclasses.replace(self, env=merged, params={**self.params, **params})


_COMMAND = Text((_command,))
_WORKSPACE = Table(
    {
        "workdir": Field(Before(_workdir)),
        "exclude": Field(Array(Text((_exclude,)), MAX_PATTERNS), required=False),
    },
    build=Workspace,
)
_JOB_TABLE = Table(
    {  # exactly the spec §4 fields, in the order problems are looked for
        "name": Field(Text((_safe_name,))),
        "run": Field(_COMMAND),
        "setup": Field(_COMMAND, required=False),
        "workspace": Field(_WORKSPACE, required=False),
        "outputs": Field(Array(Text((_output,)), MAX_PATTERNS, (_no_duplicates,)), required=False),
        "env": Field(
            StrMap(Text((_env_name,)), Text((_env_value,)), MAX_ENV_VARS, (_env_total,)),
            required=False,
        ),
    }
)
_JOB_FILE = Table({"job": Field(_JOB_TABLE)})


def parse_job(text: str, source: Path) -> JobSpec:
    """Validate job TOML text; `source` names the file in errors and anchors the workdir."""
    source = Path(source).absolute()
    return _validate(text, parse_toml(text, source, JobFileError), source)


def load_job(path: Path) -> JobSpec:
    """Read and validate a job file; every problem is one JobFileError line."""
    source = Path(path).absolute()
    text, data = read_toml(source, JobFileError)
    return _validate(text, data, source)


def _validate(text: str, data: dict[str, object], source: Path) -> JobSpec:
    checked, problems = check(_JOB_FILE, data, {"base": source.parent})
    if problems:
        first = first_problem(problems)
        problem = Redactor(_env_values(data))(first.text)
        raise located_error(JobFileError, text, source, first.loc, problem, first.value)
    return JobSpec(**checked["job"], source=source)


def _env_values(data: dict[str, object]) -> list[str]:
    """The env values a job file holds, whatever else is wrong with it: a problem quotes
    what it found (`'/abs-<value>' is absolute`), and a path that repeats a secret must
    not print it in the error any more than the run would in its events."""
    job = data.get("job")
    env = job.get("env") if isinstance(job, dict) else None
    return [v for v in env.values() if isinstance(v, str)] if isinstance(env, dict) else []
