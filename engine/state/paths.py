"""Where swjob keeps things on the operator's machine.

State (run index, instance ledger) and cache (local nodes' directories) live in
the user's platform directories, never in the repo. `SWJOB_STATE_DIR` and
`SWJOB_CACHE_DIR` override them: tests point them at temp dirs. Both are private
(0700, see `private`): they hold join tokens, identities and local nodes' workspaces.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from engine.state.private import private_dir

APP = "swjob"


def _dir(env: str, default: str) -> Path:
    return private_dir(Path(os.environ.get(env) or default))


def state_dir() -> Path:
    return _dir("SWJOB_STATE_DIR", platformdirs.user_state_dir(APP))


def cache_dir() -> Path:
    return _dir("SWJOB_CACHE_DIR", platformdirs.user_cache_dir(APP))


def config_dir() -> Path:
    return Path(os.environ.get("SWJOB_CONFIG_DIR") or platformdirs.user_config_dir(APP))


def default_pools_file() -> Path:
    return config_dir() / "pools.toml"


DEFAULT_RUNS_DIR = Path("swjob-runs")
