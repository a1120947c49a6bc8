"""Where a rented node gets the swjob agent: the very build this operator runs.

pip records how a package was installed (PEP 610 `direct_url.json`). From a package
index (no record): the node installs `swjob==<version>`. From a git URL: the node
installs the same commit. From a wheel or sdist URL: the same URL. From a local
directory or file, which no rented node can reach, there is no safe guess (a bare
`swjob==<version>` could fetch a stranger's package of that name), so the pool must
say where with `agent_install` — and the run stops before any node is rented.
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from typing import Any

from agent.closure import DISTRIBUTIONS
from engine.jobs.pools import Pool
from engine.providers.base import ProvisionError

EXAMPLE = "swjob @ git+https://github.com/<you>/swjob@<commit>"


def requirement_from(version: str, direct_url: str | None) -> str | None:
    """The pip requirement that reinstalls this build elsewhere, or None if none can."""
    if direct_url is None:
        return f"swjob=={version}"
    try:
        info: Any = json.loads(direct_url)
    except ValueError:
        return None
    url = info.get("url", "") if isinstance(info, dict) else ""
    if not url.startswith(("https://", "ssh://")):
        return None  # file:// is on this machine only; plain http is no source to trust
    vcs = info.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("vcs") == "git":
        ref = vcs.get("commit_id") or vcs.get("requested_revision")
        spec = f"swjob @ git+{url}" + (f"@{ref}" if ref else "")
        subdirectory = info.get("subdirectory")
        return spec + (f"#subdirectory={subdirectory}" if subdirectory else "")
    if "archive_info" in info:
        return f"swjob @ {url}"
    return None


def own_requirement() -> str | None:
    """How a node installs the swjob installed here (None: from here only).

    Only an installer's record counts (its INSTALLER file): a source tree on sys.path
    can carry a stale `swjob.egg-info` build artefact that would read as an index install."""
    installed = [d for d in metadata.distributions(name="swjob") if d.read_text("INSTALLER")]
    if not installed:
        return None
    return requirement_from(installed[0].version, installed[0].read_text("direct_url.json"))


def agent_install_for(pool: Pool) -> str:
    """The pool's `agent_install`, else this build's own requirement; refuses before renting
    when neither is something a node can install."""
    if pool.agent_install:
        return pool.agent_install
    found = own_requirement()
    if found is None:
        raise ProvisionError(
            f"pool {pool.name!r}: this swjob was installed from a local directory, which a "
            f"rented node cannot reach; set agent_install in the pool, e.g. {EXAMPLE!r}"
        )
    return found


def python_needed() -> str:
    """What the agent needs of a node's python3: this build's Requires-Python (`>=3.11`)."""
    return metadata.metadata("swjob").get("Requires-Python") or "any version"


def agent_closure() -> list[str]:
    """The agent's distributions and everything they require, each pinned to the version
    installed here: a node runs the libraries this operator tested with, and installs
    them in one `--no-deps` step with nothing to resolve. A requirement not installed
    here (an extra, or one for another Python) is not needed by this build either;
    tests/unit/test_agent_closure.py checks none depends on the platform (the node is
    Linux, the operator may be a Mac)."""
    pins: dict[str, str] = {}
    todo = list(DISTRIBUTIONS)
    while todo:
        name = _canonical(todo.pop())
        if name in pins:
            continue
        try:
            pins[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        for requirement in metadata.requires(name) or []:
            if not _EXTRA.search(requirement):
                todo.append(_NAME.match(requirement).group())  # type: ignore[union-attr]
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA = re.compile(r";.*\bextra\s*==")


def _canonical(name: str) -> str:
    """PEP 503: one spelling per distribution (typing_extensions == typing-extensions)."""
    return re.sub(r"[-_.]+", "-", name).lower()
