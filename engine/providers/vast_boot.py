"""What a Vast.ai instance is told to do when it boots: get the agent and start it.

The instance's on-start command installs the agent's third-party closure
(agent/closure.py, pinned to the operator's versions; the sink's client only for a run
whose pool has a sink) with `--no-deps` — with `uv` when
the image has it, else pip — and then runs agent/codefetch.py inline: it fetches this
operator's own agent code over iroh, checks it against the SHA-256 named in the command,
and starts the agent from it (engine/providers/agent_source.py). A pool's `agent_install`
overrides that: swjob is then installed from that requirement in the same step, and
started as `python3 -P -m agent` (the `swjob-agent` script's module: found whatever the
container's PATH). Either way the agent gets the run's bootstrap and the node-clock times
the install began and ended (it reports them when it joins: the "agent installed" step of
the boot timeline). The join token is NOT in the command: it travels in the instance's
environment (`TOKEN_ENV`), which the agent (and the fetch) reads. Everything printed goes
to `$HOME/swjob/agent.log` on the node, the first place to look when a node never joins.

The command is backgrounded (`( ... ) &`) because an on-start script is expected to
return; the container itself keeps running under Vast's own init.
"""

from __future__ import annotations

import base64
import shlex
import zlib
from functools import cache
from pathlib import Path

from agent import codefetch
from engine.providers.agent_source import agent_bundle, agent_closure
from engine.providers.base import Bootstrap
from engine.state.identity import operator_id

LABEL_PREFIX = "swjob:"
NODE_DIR = "$HOME/swjob"  # expanded on the node, hence not shell-quoted
NODE_ROOT = f'"{NODE_DIR}"'
AGENT_LOG = f"{NODE_DIR}/agent.log"  # what the install and the agent print, on the node
_PIP = (
    "PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet "
    "--disable-pip-version-check --no-input --no-warn-conflicts"
)
# uv resolves and installs several times faster than pip; images built for ML often ship it.
_UV = "uv pip install --quiet --python python3 --break-system-packages"
# The agent as a module of the python3 it was installed for, not the `swjob-agent` script:
# that lands in the interpreter's scripts dir, which the container's PATH may leave out
# (a `pip --user` install, a python3 outside the image's PATH dirs). `-P` (3.11+, which the
# agent needs anyway) keeps the working directory off sys.path: an `agent/` folder there
# must not stand in for the installed package.
_AGENT = "python3 -P -m agent"
_NOW = "date +%s.%N"  # the node's clock around the install: the agent reports both times
_FETCH = Path(codefetch.__file__)  # run inline: nothing of swjob is on the node before it


def label_for(run_id: str) -> str:
    """Marks an instance as swjob's, this operator's and this run's, so it can always be
    found again — and told apart from other operators' on a shared account:
    `swjob:<operator id>:<run id>` (39 characters; Vast keeps ~60)."""
    return f"{LABEL_PREFIX}{operator_id()}:{run_id}"


def _parts(label: str | None) -> tuple[str | None, str] | None:
    if not label or not label.startswith(LABEL_PREFIX):
        return None
    rest = label[len(LABEL_PREFIX) :]
    operator, sep, run_id = rest.partition(":")
    return (operator, run_id) if sep else (None, rest)  # labels before operator ids


def run_id_of(label: str | None) -> str | None:
    """The run an instance belongs to, or None when it is not one of swjob's."""
    parts = _parts(label)
    return parts[1] if parts else None


def operator_of(label: str | None) -> str | None:
    """The operator who created a swjob instance (None for labels without one)."""
    parts = _parts(label)
    return parts[0] if parts else None


def install_command(packages: list[str]) -> str:
    """Shell that installs `packages` in one `--no-deps` step: nothing to resolve, and the
    console's and the Vast SDK's trees never reach a node."""
    listed = " ".join(shlex.quote(p) for p in packages)
    return (
        f"if command -v uv >/dev/null 2>&1; then {_UV} --no-deps {listed}; "
        f"else {_PIP} --no-deps {listed}; fi"
    )


@cache
def _fetch_inline() -> str:
    """agent/codefetch.py as one `python3 -c` program, compressed: ~2 KB of the on-start
    command instead of ~5 (a provider's on-start field is not unbounded)."""
    packed = base64.b64encode(zlib.compress(_FETCH.read_bytes(), 9)).decode()
    return f"import base64,zlib;exec(zlib.decompress(base64.b64decode('{packed}')))"


def onstart_command(bootstrap: Bootstrap, agent_install: str | None) -> str:
    """The shell command run at boot; contains no secret (the token is in the env).
    Without `agent_install` the node runs the operator's own agent code (codefetch)."""
    args = " ".join(shlex.quote(a) for a in bootstrap.agent_args())
    if agent_install is None:
        install = install_command(agent_closure(bootstrap.sink))
        _, digest = agent_bundle()
        agent = f"python3 -P -c {shlex.quote(_fetch_inline())} {digest}"
    else:
        install = install_command([agent_install, *agent_closure(bootstrap.sink)])
        agent = _AGENT
    return (
        f"mkdir -p {NODE_ROOT} && cd {NODE_ROOT} && "
        f"( started=$({_NOW}); {{ {install}; }} && exec {agent} {args} --root {NODE_ROOT} "
        f'--installed "$started" "$({_NOW})" ) >> agent.log 2>&1 &'
    )
