"""The node's own meter: a run's money limits hold while its operator is away.

The operator's engine enforces `max_dollars` / `max_hours` (engine/run/costmeter.py), but
only while it runs: a laptop closed or an engine killed -9 left a rented node billing
until its orphan timeout (half an hour by default, many times a small cap). So the node
keeps the same meter, with the same formula (`cap_reason`, which the engine imports).
It is told at boot, on its command line, its price ($/h, storage included where the
provider bills it), its caps, and the moment before its create request (which the
operator wrote in its ledger first). Both meters count from one start (`billing_start`):
the provider's own start time where it reports one (Vast's `start_date`: the node reads it
with the container's scoped key, the operator from its listing), else that pre-create
time. RunPod reports none (a pod's `uptimeSeconds` counts from its last resume, not its
rental), so a pod's meters count from the pre-create time.

When lifetime × price reaches a cap:
- with its operator silent (no control session: the operator is dead, asleep or cut
  off), the node stops the job and destroys its own instance at once;
- with a session up, the operator's meter stops the run (and collects its outputs
  first); the node steps in only if the job still runs `OPERATOR_MARGIN_S` past the cap
  and the operator never asked it to stop — an operator that heartbeats but does not
  meter must not let the node bill on either.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent import orphan

OPERATOR_MARGIN_S = 30.0
TICK_S = 1.0
LOOKUP_TIMEOUT_S = 10.0


def cap_reason(
    alive_s: float, price: float | None, max_dollars: float | None, max_hours: float | None
) -> str | None:
    """Why a node alive `alive_s` at `price` $/h is past its caps, or None while within
    them. The engine's meter and the node's use this one definition."""
    if max_hours is not None and alive_s / 3600 >= max_hours:
        return f"cap reached: max_hours {max_hours:g}"
    if max_dollars is not None and price is not None:
        dollars = price * alive_s / 3600
        if dollars >= max_dollars:
            return f"cap reached: max_dollars ${max_dollars:g} (spent ${dollars:.4f})"
    return None


@dataclass(frozen=True)
class Budget:
    """What the node knows of its run's money: price, caps, and when billing began."""

    since: float
    price_per_hour: float | None = None
    max_dollars: float | None = None
    max_hours: float | None = None
    reported: bool = True  # the provider's start may replace `since` (not at a warm claim)

    def allowance_s(self) -> float | None:
        """Seconds of node life the caps allow (None: no cap applies)."""
        limits = []
        if self.max_hours is not None:
            limits.append(self.max_hours * 3600)
        if self.max_dollars is not None and self.price_per_hour:
            limits.append(self.max_dollars / self.price_per_hour * 3600)
        return min(limits) if limits else None

    def reason(self, now: float) -> str | None:
        alive_s = max(0.0, now - self.since)
        return cap_reason(alive_s, self.price_per_hour, self.max_dollars, self.max_hours)


def billing_start(reported: float | None, pre_create: float) -> float:
    """When a node began to bill, for the node's meter and the operator's alike: its
    provider's reported start where there is one (`reported_start`), else `pre_create`,
    the moment before its create request was sent (never later than its billing)."""
    return pre_create if reported is None else reported


def reported_start(row: object) -> float | None:
    """The start time an instance's listing reports (Vast's `start_date`, epoch seconds;
    null until the instance first runs), or None."""
    start = row.get("start_date") if isinstance(row, dict) else None
    if isinstance(start, bool) or not isinstance(start, int | float) or start <= 0:
        return None
    return float(start)


def provider_start(api_url: str) -> float | None:
    """The instance's start time as Vast lists it (`start_date`), read with the container's
    own key; None when there is no key, no answer or no start time. urllib is imported
    here, by the few agents that keep a meter."""
    import urllib.request

    credential = orphan.container_credential()
    if credential is None:
        return None
    instance, key = credential
    url = f"{api_url.rstrip('/')}/api/v0/instances/{instance}/?owner=me"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=LOOKUP_TIMEOUT_S) as answer:
            said = json.loads(answer.read(1 << 20))
    except (OSError, ValueError):
        return None
    row = said.get("instances") if isinstance(said, dict) else None
    return reported_start(row[0] if isinstance(row, list) and row else row)


async def reached(
    budget: Budget,
    *,
    alone: Callable[[], bool],
    operator_stopping: Callable[[], bool],
    busy: Callable[[], bool],
) -> str:
    """Return the cap's reason once the node must act on it itself (module docstring)."""
    while True:
        now = time.time()
        reason = budget.reason(now)
        if reason is not None:
            if alone():
                return reason
            allowed = budget.allowance_s() or 0.0
            overdue = now - budget.since - allowed >= OPERATOR_MARGIN_S
            if overdue and busy() and not operator_stopping():
                return f"{reason}; the operator did not stop the job"
        await asyncio.sleep(TICK_S)
