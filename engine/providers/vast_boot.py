"""What a Vast.ai instance is told to do when it boots: install the agent and start it.

The instance's on-start command installs the agent with pip (the requirement from
agent_source: the pool's `agent_install`, else this very build) and starts
`swjob-agent` in the background with the run's bootstrap. The join token is NOT in
the command: it travels in the instance's environment (`TOKEN_ENV`), which the agent
reads. Everything the agent and pip print goes to `$HOME/swjob/agent.log` on the
node, the first place to look when a node never joins.

The command is backgrounded (`( ... ) &`) because an on-start script is expected to
return; the container itself keeps running under Vast's own init.
"""

from __future__ import annotations

import shlex

from engine.providers.base import Bootstrap

LABEL_PREFIX = "swjob:"
NODE_ROOT = '"$HOME/swjob"'  # expanded on the node, hence not shell-quoted
_PIP = (
    "PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet "
    "--disable-pip-version-check --no-input"
)


def label_for(run_id: str) -> str:
    """Marks an instance as swjob's and this run's, so it can always be found again."""
    return f"{LABEL_PREFIX}{run_id}"


def run_id_of(label: str | None) -> str | None:
    """The run an instance belongs to, or None when it is not one of swjob's."""
    if label and label.startswith(LABEL_PREFIX):
        return label[len(LABEL_PREFIX) :]
    return None


def onstart_command(bootstrap: Bootstrap, agent_install: str) -> str:
    """The shell command run at boot; contains no secret (the token is in the env)."""
    requirement = shlex.quote(agent_install)
    args = " ".join(shlex.quote(a) for a in bootstrap.agent_args())
    return (
        f"mkdir -p {NODE_ROOT} && cd {NODE_ROOT} && "
        f"( {_PIP} {requirement} && exec swjob-agent {args} --root {NODE_ROOT} ) "
        ">> agent.log 2>&1 &"
    )
