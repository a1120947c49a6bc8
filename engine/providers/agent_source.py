"""Where a rented node gets the swjob agent: from this operator, the very code it runs.

The node installs only the agent's third-party closure from the package index (pinned to
the versions here, `agent_closure`); swjob's own agent code it fetches from the operator
over the run's iroh connection (agent/codefetch.py), as a bundle of the `agent` package
this process imports, checked against the SHA-256 the boot command names. That works
however swjob was installed here — a checkout, an editable install, a wheel, a git URL,
the index — and the node runs exactly this build. A pool's `agent_install` (a pip
requirement) stays as an override: the node then installs swjob from there instead.
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from functools import cache
from importlib import metadata
from pathlib import Path

from agent.closure import DISTRIBUTIONS, SINK_DISTRIBUTIONS

_FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # a bundle's bytes depend on the code alone


@cache
def agent_bundle() -> tuple[bytes, str]:
    """The `agent` package this process runs, as a zip of its Python files, and the zip's
    SHA-256: what a node fetches, and what its boot command names. Built once a process
    (~50 ms), the same bytes for the same code (sorted names, fixed times)."""
    import agent

    root = Path(agent.__file__).parent
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in sorted(root.rglob("*.py")):
            name = path.relative_to(root.parent).as_posix()
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            bundle.writestr(info, path.read_bytes())
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def python_needed() -> str:
    """What the agent needs of a node's python3: this build's Requires-Python (`>=3.11`)."""
    return metadata.metadata("swjob").get("Requires-Python") or "any version"


def agent_closure(sink: bool = False) -> list[str]:
    """The agent's distributions (with `sink`, the store client's too: a run whose pool
    has a sink) and everything they require, each pinned to the version installed here:
    a node runs the libraries this operator tested with, and installs them in one
    `--no-deps` step with nothing to resolve. A requirement not installed
    here (an extra, or one for another Python) is not needed by this build either;
    tests/unit/test_agent_closure.py checks none depends on the platform (the node is
    Linux, the operator may be a Mac)."""
    pins: dict[str, str] = {}
    todo = [*DISTRIBUTIONS, *(SINK_DISTRIBUTIONS if sink else ())]
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
