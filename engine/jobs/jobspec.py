"""Job files (spec §4): a `[job]` table with exactly name, run, setup, workspace, outputs, env.

A job says what to do, never where: anything else in the file is rejected by name,
so a stray `gpu = ...` is an error instead of silently ignored. Every value that
later becomes a directory name, a path on the node, a glob or an environment
variable is checked here, once, so the rest of the engine and the agent can trust
a JobSpec. `env` values are secrets: no message built here ever contains one.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from engine.jobs.tomlload import (
    SAFE_NAME,
    SAFE_NAME_RULE,
    ConfigFileError,
    parse_toml,
    read_toml,
    shown,
    toml_type,
    validation_error,
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


Name = Annotated[str, AfterValidator(_safe_name)]
Command = Annotated[str, AfterValidator(_command)]
Output = Annotated[str, AfterValidator(_output)]
Exclude = Annotated[str, AfterValidator(_exclude)]
Env = Annotated[
    dict[Annotated[str, AfterValidator(_env_name)], Annotated[str, AfterValidator(_env_value)]],
    Field(max_length=MAX_ENV_VARS),
    AfterValidator(_env_total),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Workspace(_Strict):
    """The tree pushed to the node. `workdir` is absolute once validated: relative paths
    in a job file are relative to the file's folder (context `base`), not the cwd."""

    workdir: Path
    exclude: Annotated[list[Exclude], Field(max_length=MAX_PATTERNS)] = []

    @field_validator("workdir", mode="before")
    @classmethod
    def _resolve(cls, value: object, info: ValidationInfo) -> Path:
        if not isinstance(value, str | Path):
            raise ValueError(f"expected a string, got {toml_type(value)}")
        base = Path((info.context or {}).get("base") or Path.cwd())
        if "\0" in str(value):
            raise ValueError("contains a NUL byte")
        path = base / Path(value).expanduser()
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


class _JobTable(_Strict):
    """The `[job]` table: exactly the spec §4 fields."""

    name: Name
    run: Command
    setup: Command | None = None
    workspace: Workspace | None = None
    outputs: Annotated[
        list[Output], Field(max_length=MAX_PATTERNS), AfterValidator(_no_duplicates)
    ] = []
    env: Env = {}


class JobSpec(_JobTable):
    """A validated job plus the file it came from (absolute)."""

    source: Path

    def secrets(self) -> list[str]:
        """The env values: what redaction must hide wherever text leaves a process."""
        return list(self.env.values())


class _JobFile(_Strict):
    job: _JobTable


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
    try:
        table = _JobFile.model_validate(data, context={"base": source.parent}).job
    except ValidationError as exc:
        raise validation_error(exc, text, source, _JobFile, JobFileError) from None
    return JobSpec(**dict(table), source=source)
