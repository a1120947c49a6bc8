"""The node's credentials, kept out of the job's reach.

A job runs as the agent's user (root, on Vast) and reads what that user can: its own
environment, `/proc/<agent pid>/environ`, files on the node. So:

- the agent takes its join token from a file (`--secrets-file`, 0600, outside the
  workdir) that it deletes once read, before any step runs;
- an agent started with a secret in its environment (the Vast instance's env, which the
  on-start command inherits) moves it to such a file and re-executes itself without it:
  `/proc/<pid>/environ` shows a process's environment as it was at exec, so popping it
  from `os.environ` would leave it there;
- the environment a step or a shell is given never holds `SECRET_NAMES`.

What stays readable is said in docs/security.md: PID 1's environment on Vast (the
provider's, set before the agent exists) holds the join token — single use, spent once
the node has joined (engine/run/control.py) — and the instance's own API key. The
re-attach credential is never on the node: only its public half (agent/reattach.py).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

from agent.ownpython import own_python

TOKEN_ENV = "SWJOB_JOIN_TOKEN"  # same name as engine.providers.base.TOKEN_ENV
NOTIFY_ENV = "SWJOB_NOTIFY"  # the operator's notify targets the node tells (agent/nodenotify.py)
SECRETS_FLAG = "--secrets-file"
SECRET_NAMES = (
    TOKEN_ENV,
    "SWJOB_REATTACH_KEY",  # older engines' re-attach secret
    NOTIFY_ENV,  # notification targets: their URLs hold tokens
    "CONTAINER_API_KEY",  # Vast's instance-scoped key: it can destroy the node
    "RUNPOD_API_KEY",  # RunPod's pod-scoped key
)


_KEPT: dict[str, str] = {}  # the secrets besides the token this agent was started with


class CredentialError(Exception):
    """The credentials could not be taken; one line for the agent's usage error."""


def scrubbed(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without the node's secrets: the base of every step's and shell's env."""
    return {k: v for k, v in environ.items() if k not in SECRET_NAMES}


def kept_env() -> dict[str, str]:
    """This agent's environment with the secrets it was started with (its own use only:
    e.g. the container's key, to destroy its instance once orphaned)."""
    return {**os.environ, **_KEPT}


def write_secrets(path: Path, token: str, kept: Mapping[str, str] | None = None) -> Path:
    """The file an agent reads its join token (and `kept`: other secrets of its start-up
    environment) from: 0600, made new (nothing there before)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"token": token, "kept": dict(kept or {})}, out)
    return path


def read_secrets(path: Path) -> str:
    """The join token from a secrets file, which is deleted at once (its other secrets go
    to `kept_env`); it must be a regular file of this user's that nobody else can read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise CredentialError(f"{path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise CredentialError(f"{path}: not a regular file of this user's")
        if info.st_mode & 0o077:
            raise CredentialError(f"{path}: readable by others (mode {info.st_mode & 0o777:o})")
        with os.fdopen(fd, closefd=False) as handle:
            said = json.load(handle)
        token = said.get("token")
        _KEPT.update({str(k): str(v) for k, v in (said.get("kept") or {}).items()})
    except (ValueError, AttributeError):
        raise CredentialError(f"{path}: not a secrets file") from None
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    if not isinstance(token, str) or not token:
        raise CredentialError(f"{path}: no join token in it")
    return token


def reexec_without_secrets(argv: list[str], root: Path, token: str) -> str:
    """When this process was started with secrets in its environment, move them (and
    `token`, from a secrets file already read) to a new secrets file in `root` and become
    the agent again without them (same pid). It returns the join token only when there
    was nothing to move, or nowhere to move it to (then steps still never see it:
    `scrubbed`)."""
    found = {name: os.environ[name] for name in SECRET_NAMES if name in os.environ}
    token = found.pop(TOKEN_ENV, "") or token
    if not found and TOKEN_ENV not in os.environ:
        return token
    try:
        secrets = write_secrets(root / f".secrets-{os.getpid()}", token, found)
    except OSError as exc:  # a node that still joins beats one that cannot start at all
        print(f"swjob-agent: secrets left in the environment: {exc.strerror}", file=sys.stderr)
        _KEPT.update(found)
        return token
    command = [*own_python(_RERUN), *_without_secrets_flag(argv)]
    os.execve(sys.executable, [*command, SECRETS_FLAG, str(secrets)], scrubbed(os.environ))


_RERUN = "import runpy;runpy.run_module('agent',run_name='__main__',alter_sys=True)"
"""This very agent package again (agent/ownpython.py says why not `-m agent`)."""


def _without_secrets_flag(argv: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == SECRETS_FLAG:
            skip = True
        elif not arg.startswith(SECRETS_FLAG + "="):
            kept.append(arg)
    return kept
