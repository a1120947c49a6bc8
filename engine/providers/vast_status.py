"""What Vast.ai's instance listing says about a node coming up: the boot timeline's steps
between "instance created" and the agent's own report.

Vast documents the fields (show instance): `actual_status` is null while the instance
is being provisioned, `loading` while the image downloads and the container starts,
then `running`; `intended_status` and `cur_state` (the machine contract) read
`running` throughout a normal boot; `status_msg` is the human-readable detail (shown
with the step). The provider polls the instance anyway to see it die; while it boots it
polls faster (`boot_poll_s`, $SWJOB_VAST_BOOT_POLL_S), so a step is seen within that
long of happening — and one shorter than a poll may be missed, which the timeline
shows as "not seen", never as 0 s.
"""

from __future__ import annotations

import os
from typing import Any

from engine.report.events import BootPhase

BOOT_POLL_ENV = "SWJOB_VAST_BOOT_POLL_S"
BOOT_POLL_S = 2.0
STATUS_MSG_MAX = 200
_STEPS = {"loading": BootPhase.IMAGE_LOADING, "running": BootPhase.CONTAINER_RUNNING}
# Docker's own words when it could not pull the image or start its container (Vast shows
# them as the status_msg of an instance left "created"/"loading": "Error response from
# daemon: pull access denied for …", "… OCI runtime create failed: …"). It will not run.
_START_FAILED = ("Error response from daemon", "OCI runtime create failed")
# ... unless they say the registry or the network was only slow or busy: Vast's host pulls
# again by itself, and failing the run then would end a boot that was about to go on.
_PULL_RETRIED = (
    "toomanyrequests", "timeout", "timed out", "TLS handshake", "connection reset",
    "connection refused", "unexpected EOF", "temporary failure", "Service Unavailable",
    "Bad Gateway", "Gateway Time", "Internal Server Error",
)  # fmt: skip
_NOT_STARTED = (None, "created", "loading")


def boot_poll_s() -> float:
    """How often a booting instance is looked at: $SWJOB_VAST_BOOT_POLL_S, else 2 s."""
    try:
        value = float(os.environ.get(BOOT_POLL_ENV) or BOOT_POLL_S)
    except ValueError:
        return BOOT_POLL_S
    return value if value > 0 else BOOT_POLL_S


class BootWatch:
    """Successive listings of one instance → its boot steps, each reported once."""

    def __init__(self) -> None:
        self._seen: set[BootPhase] = set()

    @property
    def done(self) -> bool:
        """The container runs: nothing more to see here (the agent reports the rest)."""
        return BootPhase.CONTAINER_RUNNING in self._seen

    def start_failed(self, row: dict[str, Any]) -> str | None:
        """Docker's error, when this listing says the container could not be started."""
        said = str(row.get("status_msg") or "").strip()
        if self.done or row.get("actual_status") not in _NOT_STARTED:
            return None  # a dead one (exited, stopped) is said as such, with the same words
        if not any(m in said for m in _START_FAILED):
            return None
        if any(m.lower() in said.lower() for m in _PULL_RETRIED):
            return None  # a passing failure: the boot timeout still bounds it
        return said[:STATUS_MSG_MAX]

    def observe(self, row: dict[str, Any]) -> list[tuple[BootPhase, str | None]]:
        """The steps this listing newly shows, with Vast's status message as the detail."""
        step = _STEPS.get(str(row.get("actual_status")))
        if step is None or step in self._seen or self.done:
            return []
        self._seen.add(step)
        said = str(row.get("status_msg") or "").strip()[:STATUS_MSG_MAX]
        return [(step, said or None)]
