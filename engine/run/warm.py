"""A run's side of warm nodes: take a kept node instead of renting one, and keep the node
at the run's end instead of destroying it (pool key `keep_warm_s`; docs/warm-nodes.md).

Claiming (engine/state/warmnodes.py picks the record, atomically): we dial the parked
agent on WARM_ALPN and prove its warm key (agent/warm.py); it then joins us with this
run's token like a freshly started agent, so everything after — join deadline, workspace
push, steps — is the ordinary path. A node that does not answer is gone or going (it
expired, crashed, was destroyed under us): its record is dropped, the provider is asked
to destroy what may be left of it, and the next one is tried, then a fresh rent — never
an error for the run.

Parking: a run whose node is healthy at its end (joined, not lost, no node fault or
internal error, not preempted, not stopped by a cap, no step left running) sends `Park`
with a new warm key instead of `Shutdown`; the provider lets go of the node without
destroying it and the record is written. From then on the node's own clock bounds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

from agent import reattach
from agent.protocol import WARM_ALPN, Claim, Park
from agent.reattach import proof
from agent.redial import describe
from engine.providers.base import Bootstrap, NodeHandle, Provider
from engine.report import scope
from engine.report.events import Alert, BootPhase
from engine.run.reclaim import handshake
from engine.run.teardown import destroy
from engine.state import warmnodes
from engine.state.warmnodes import WarmNode

if TYPE_CHECKING:
    from engine.run.orchestrator import RunDriver

log = logging.getLogger("swjob.engine")

PARK_S = 10.0
"""For the node to take `Park` and end its session (it flushes its last events first,
agent/node.py `_flush_sent`): milliseconds when well; past it the node is destroyed."""
CLAIM_TIMEOUT_S = 10.0
"""A live warm node answers a claim in milliseconds (a relay: a second or two); one that
does not within this is taken for gone, and the run rents anew rather than wait. 3 s was
too short on a busy 2-core machine (the claim's QUIC handshake alone took longer, and a
live warm node was passed over for a new one); a rented node's boot takes minutes."""
UNHEALTHY = ("NodeFault", "NodeLost", "NodePreempted", "InternalError")
CAPPED = "cap reached"


def unhealthy(event: object) -> bool:
    """An event after which the node is not kept: it failed, vanished or was capped."""
    name = type(event).__name__
    return name in UNHEALTHY or (name == "OperatorStop" and CAPPED in getattr(event, "reason", ""))


async def claim(
    endpoint: Any, provider: Provider, pool: Any, bootstrap: Bootstrap
) -> tuple[NodeHandle, str] | None:
    """A warm node of `pool` that accepted `bootstrap`'s run, adopted by `provider`, and
    the run it was born for; None when there is none to take (the caller rents). Its boot
    step says how long it idled."""
    fits = warmnodes.fits_key(pool)
    while (node := await _next(fits, bootstrap.run_id)) is not None:
        handle = NodeHandle(**{**node.handle, "created_at": time.time()})
        try:
            await _dial(endpoint, node, bootstrap)
        except Exception as exc:  # gone or going: rent anew; what may be left is destroyed
            log.info("warm node %s did not take the run: %s", node.node_id, describe(exc))
            await forget(provider, node)
            continue
        provider.adopt(handle)
        idle = node.idle_s()
        scope.boot_reached(BootPhase.WARM_REUSED, f"idle {idle:.0f} s")
        return handle, node.birth_run or node.last_run
    return None


async def _next(fits: str, run_id: str) -> WarmNode | None:
    """The next warm node to try; None also when the records cannot be read (renting
    anew is never wrong: an unclaimed node releases itself)."""
    try:
        return await asyncio.to_thread(warmnodes.claim, fits, run_id)
    except OSError as exc:
        log.warning("warm nodes not read: %s", exc)
        return None


async def _dial(endpoint: Any, node: WarmNode, bootstrap: Bootstrap) -> None:
    def answer(nonce: str, me: str, ticket: str) -> Claim:
        return Claim(
            run_id=bootstrap.run_id,
            orchestrator_id=me,
            ticket=ticket,
            proof=proof(node.warm_key, nonce, bootstrap.run_id, me, ticket),
            token=bootstrap.token,
            reattach_id=bootstrap.reattach_id,
        )

    await handshake(endpoint, node.agent_ticket, WARM_ALPN, answer, CLAIM_TIMEOUT_S)


async def forget(provider: Provider, node: WarmNode) -> str | None:
    """Drop `node`'s record and destroy what is left of it (None: done, or nothing was
    left; else why it could not be confirmed). What is left is what its provider finds
    of the node's birth run now — a local agent still working in its directory, a Vast
    instance its ledger rows name — never the recorded pid alone, which may be another
    process's by now."""
    warmnodes.drop(node.node_id)
    handle = await provider.find_node(node.birth_run or node.last_run)
    if handle is None or handle.node_id != node.node_id:
        return None
    return await destroy(provider, handle)


def keeps(driver: RunDriver) -> bool:
    """Whether the run's node stays warm at the run's end."""
    session = driver.session
    return (
        driver.pool.keep_warm_s > 0
        and driver.handle is not None
        and driver.healthy
        and not driver.lost
        and session.joined.is_set()
        and not session.closed
        and driver.step_over
        and session.endpoint_id is not None
        and bool(session.hello and session.hello.ticket)
    )


async def park(driver: RunDriver, provider: Provider) -> bool:
    """Keep the run's node warm: True once the node was told and recorded; False leaves
    it to the ordinary teardown (destroyed)."""
    if not keeps(driver):
        return False
    assert driver.handle is not None and driver.session.hello is not None
    key = reattach.new_key()  # its secret half stays in our private store
    keep_s = driver.pool.keep_warm_s
    try:
        async with asyncio.timeout(PARK_S):
            await driver.session.send(Park(keep_warm_s=keep_s, warm_id=reattach.public_of(key)))
            # sent is not received: the run's end closes the connection, and a Park still
            # in our buffer then never arrives (the node, never parked, redials a run that
            # is over, and its record's claim fails). The node ends its session once it
            # has it.
            await driver.session.ended_by_node()
    except Exception as exc:
        log.info("could not park the node of %s: %s", driver.view.run_id, describe(exc))
        return False
    provider.park(driver.handle)
    handle = dataclasses.asdict(driver.handle)
    handle["created_at"] = None
    node = WarmNode(
        node_id=driver.handle.node_id,
        provider=driver.handle.provider,
        pool=driver.pool.name,
        fits=warmnodes.fits_key(driver.pool),
        handle=handle,
        agent_ticket=driver.session.hello.ticket or "",
        agent_id=driver.session.endpoint_id or "",
        warm_key=key,
        keep_warm_s=keep_s,
        parked_at=time.time(),
        last_run=driver.view.run_id,
        price_per_hour=driver.handle.price_per_hour,
        birth_run=driver.birth_run,
    )
    try:
        await asyncio.to_thread(warmnodes.park, node)
    except OSError as exc:  # unrecorded, nothing can claim it: it bills until its clock ends
        said = f"node kept warm but not recorded ({exc.strerror or exc}): it bills until it "
        said += f"releases itself in {keep_s:g} s"
        driver.publish(Alert(run_id=driver.view.run_id, message=said, persistent=True))
    return True


def let_go(handle: NodeHandle) -> None:
    """The run's node was destroyed at its end: a warm node it had claimed is no more."""
    with contextlib.suppress(OSError):
        warmnodes.drop(handle.node_id)


async def release(provider: Provider, node: WarmNode) -> str | None:
    """Destroy a parked warm node now (`swjob nodes release`): None when done (or it was
    gone already), else why it could not be confirmed. A node in use by a run is not
    taken from it (its run's end decides); one another process claims meanwhile either."""
    if warmnodes.take(node.node_id, "release") is None:
        return f"warm node {node.node_id} is no longer parked (taken by a run, or gone)"
    return await forget(provider, node)
