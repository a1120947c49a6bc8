"""Why a node was lost: dead, or taken back by its provider ("preempted").

From the operator's side a preempted interruptible node and a dead one look the same:
the node goes silent. Only the provider can tell them apart, and the difference is
what the operator needs: "preempted" says run it again (the job did nothing wrong),
"node lost" says look at the node. So a session that stops hearing from its node asks
the provider once, briefly, before the loss is posted; a look that fails or takes too
long leaves it a plain node loss (the run must not wait on the provider's API).
"""

from __future__ import annotations

import asyncio
import logging

from engine.providers.base import Listed, NodeHandle, Preempted, Provider
from engine.run import fsm

EXPLAIN_WITHIN_S = 5.0

log = logging.getLogger(__name__)


def loss_event(lost: str | Preempted | Listed) -> fsm.NodeLost:
    """The FSM event for what the provider's watch reported."""
    if isinstance(lost, Preempted):
        return fsm.NodePreempted(lost.reason)
    return fsm.NodeLost(lost.reason if isinstance(lost, Listed) else lost)


async def explain(
    provider: Provider, handle: NodeHandle | None, reason: str, within_s: float = EXPLAIN_WITHIN_S
) -> fsm.NodeLost:
    """`reason` as a node loss, unless the provider says it took the node back."""
    if handle is None:
        return fsm.NodeLost(reason)
    try:
        async with asyncio.timeout(within_s):
            taken = await provider.preemption(handle)
    except Exception as exc:  # the look failed: it says nothing about the node
        log.info("could not ask the provider why node %s was lost: %s", handle.node_id, exc)
        return fsm.NodeLost(reason)
    return fsm.NodePreempted(taken.reason) if taken is not None else fsm.NodeLost(reason)
