"""Where swjob keeps things on the operator's machine.

State (run index, instance ledger) and cache (local nodes' directories) live in
the user's platform directories, never in the repo. `SWJOB_STATE_DIR` and
`SWJOB_CACHE_DIR` override them: tests point them at temp dirs. Both are private
(0700, see `private`): they hold join tokens, identities and local nodes' workspaces.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.errors import UnusableDirError
from engine.state.private import private_dir

APP = "swjob"


def _where(env: str, kind: str) -> Path:
    """`$env`, else the platform's directory of `kind` for swjob. platformdirs is imported
    only when it is asked (it costs `swjob validate` a tenth of its start-up)."""
    if os.environ.get(env):
        return Path(os.environ[env])
    import platformdirs

    return Path(getattr(platformdirs, kind)(APP))


def state_dir() -> Path:
    return private_dir(_where("SWJOB_STATE_DIR", "user_state_dir"))


def cache_dir() -> Path:
    return private_dir(_where("SWJOB_CACHE_DIR", "user_cache_dir"))


def runtime_dir() -> Path | None:
    """Where a socket whose private dir is too deep for an address goes: the user's
    runtime dir ($XDG_RUNTIME_DIR, private and emptied at logout, so a killed engine's
    socket dir does not pile up in /tmp), `SWJOB_RUNTIME_DIR` overriding it; None where
    there is none of ours (no such variable: macOS, whose temp dir is per user anyway; a
    login without one; a dir that is not ours). Not platformdirs' fallback: without the
    variable it names /tmp/runtime-<uid>, which another local user could make first."""
    for name, below in (("SWJOB_RUNTIME_DIR", ""), ("XDG_RUNTIME_DIR", APP)):
        if value := os.environ.get(name):
            try:
                return private_dir(Path(value) / below)
            except (UnusableDirError, OSError):
                return None
    return None


def config_dir() -> Path:
    return _where("SWJOB_CONFIG_DIR", "user_config_dir")


def default_pools_file() -> Path:
    return config_dir() / "pools.toml"


DEFAULT_RUNS_DIR = Path("swjob-runs")


def landing_excludes(workdir: Path, runs_dir: Path) -> list[str]:
    """The exclude pattern that keeps `runs_dir` out of a push of `workdir`, when it lies
    inside it. The default runs dir is relative to where swjob runs, which is usually the
    job's own folder: without this, every run pushed all the earlier runs' outputs and logs
    (and the landing dir of the run being pushed, still growing) to the node."""
    try:
        rel = runs_dir.resolve().relative_to(workdir.resolve())
    except ValueError:
        return []
    if rel == Path("."):
        return []  # runs land in the workspace's root itself: nothing can be told apart
    escaped = "".join("\\" + c if c in "\\*?[]!#" else c for c in rel.as_posix())
    return [f"/{escaped}/"]
