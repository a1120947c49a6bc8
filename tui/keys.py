"""Why a key does nothing here, in one line: a key whose action does not apply (no run
selected, the run has ended, another process drives it) used to do nothing at all,
silently. The app asks this when such a key reaches it (tui/app.py `on_key`)."""

from __future__ import annotations

from engine.api import RunView
from tui.owners import Owner, owner

RUN_ACTIONS = {
    "stop": "stop",
    "shell": "open a shell on",
    "forward": "forward a port of",
    "outputs": "browse the outputs of",
    "adopt": "adopt",
    "open": "open",
    "logs": "show the log of",
}


def why_not(action: str, description: str, run: RunView | None, in_dialog: bool) -> str:
    """The one line said when `action` (bound as `description`) does not apply."""
    if in_dialog:
        return f"{description}: close this dialog first (esc)"
    if action == "attempt":
        return "no other attempt that way: the job ran this one only"
    if action == "answer":  # the orphans dialog's y: what it lists is someone else's
        return f"{description}: nothing listed is ours to destroy"
    verb = RUN_ACTIONS.get(action)
    if verb is None:
        return f"{description} does not apply here"
    if run is None:
        return f"{description}: no run selected — nothing to {verb}"
    name = run.job_name
    if action == "adopt":
        if run.live:
            return f"{description}: {name} is driven by this console already"
        if run.terminal:
            return f"{description}: {name} has ended: nothing to adopt"
        return f"{description}: {name} is driven by another swjob process, which is alive"
    if run.terminal:
        return f"{description}: {name} has ended ({run.state}): nothing to {verb}"
    if owner(run) is Owner.ELSEWHERE:
        return f"{description}: {name} is driven by another swjob process (followed here)"
    if owner(run) is Owner.NOBODY:
        return f"{description}: {name} has no owner: a adopts it first"
    return f"{description}: {name} is tearing its node down: nothing to {verb}"
