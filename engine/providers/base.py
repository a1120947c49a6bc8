"""The provider contract the orchestrator relies on.

A provider provisions one node per run from a pool designation, starts
`swjob-agent` on it with the run's bootstrap, and tears it down. It does not wait
for the agent to join: the orchestrator does that (with the pool's boot deadline),
because joining is a fact of the control protocol, not of the provider.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agent import credentials
from agent.credentials import NOTIFY_ENV, SECRETS_FLAG, TOKEN_ENV
from engine.report.events import Alert
from engine.state.locked import StateNotWritten

if TYPE_CHECKING:
    from engine.state.ledger import Ledger

__all__ = ["TOKEN_ENV", "Bootstrap"]  # TOKEN_ENV: what a provider's node env carries
AGENT_SILENCE_MAX_S = 10.0  # the agent's own default (agent/main.py --deadline)


@dataclass(frozen=True)
class Bootstrap:
    """What a node needs to join its orchestrator. The token travels in a secrets file
    (`write_secrets`, the local pool) or the environment (`agent_env`: a Vast instance's),
    never in argv, so it does not show up in `ps` or in the on-start command a provider
    lists; the agent keeps it from the job either way (agent/credentials.py). The node gets
    only the public half of the run's re-attach key pair (`reattach_id`, agent/reattach.py)."""

    run_id: str
    ticket: str
    orchestrator_id: str
    token: str
    reattach_id: str = ""
    silence_s: float = AGENT_SILENCE_MAX_S
    """How long the node hears nothing from its operator before it takes it as lost, ends
    the session, redials and starts its orphan clock (`silence_for`)."""
    orphan_timeout_s: float = 1800.0
    """How long the node waits for an operator that went silent before it gives up: stops
    its job and releases itself (the provider says how, in `on_orphan`)."""
    on_orphan: tuple[str, ...] = ()
    """The provider's agent arguments for giving up (e.g. destroy the own Vast instance)."""
    max_dollars: float | None = None
    max_hours: float | None = None
    """The run's caps (what its attempt has left), for the node's own meter."""
    price_per_hour: float | None = None
    billed_since: float | None = None
    """Set by a provider whose nodes bill: the price, and a time no later than the node's
    billing began. With a cap they make the node keep its own meter (agent/budget.py)."""
    sink: bool = False
    """The run's pool has a sink: the node installs the store client too (agent/closure.py)."""

    notify: str = ""
    """The notify targets the node tells by itself when its operator is gone, as plain
    HTTP requests (JSON; engine/watch/nodetargets.py): a secret, like the token."""

    def agent_env(self) -> dict[str, str]:
        """The secrets a node whose provider has no other way reads from its environment."""
        return {TOKEN_ENV: self.token, **({NOTIFY_ENV: self.notify} if self.notify else {})}

    def write_secrets(self, path: Path) -> list[str]:
        """The token in a 0600 file at `path` (the agent deletes it once read), and the
        agent arguments that name it."""
        credentials.write_secrets(
            path, self.token, {NOTIFY_ENV: self.notify} if self.notify else {}
        )
        return [SECRETS_FLAG, str(path)]

    def agent_args(self) -> list[str]:
        reattach = ["--reattach-id", self.reattach_id] if self.reattach_id else []
        return [
            *reattach,
            "--run-id",
            self.run_id,
            "--ticket",
            self.ticket,
            "--orchestrator-id",
            self.orchestrator_id,
            "--deadline",
            f"{self.silence_s:g}",
            "--orphan-timeout",
            f"{self.orphan_timeout_s:g}",
            *self.on_orphan,
            *self._meter_args(),
        ]

    def _meter_args(self) -> list[str]:
        if self.billed_since is None or (self.max_dollars is None and self.max_hours is None):
            return []
        given = {
            "--billed-since": self.billed_since,
            "--price-per-hour": self.price_per_hour,
            "--max-dollars": self.max_dollars,
            "--max-hours": self.max_hours,
        }
        return [part for k, v in given.items() if v is not None for part in (k, repr(v))]


HEARTBEATS_PER_DEADLINE = 4


def heartbeat_for(heartbeat_s: float, node_lost_after_s: float) -> float:
    """How often the two sides of a run on this pool say they are alive: the usual pace,
    faster on a pool that takes silence for a loss sooner than a few heartbeats (either
    side would otherwise take a healthy peer for lost between two of them)."""
    return min(heartbeat_s, node_lost_after_s / HEARTBEATS_PER_DEADLINE)


def silence_for(node_lost_after_s: float) -> float:
    """The node's silence deadline on a pool whose operator gives a silent node up after
    `node_lost_after_s`. Never longer: a node whose operator died would otherwise start
    its orphan clock, and redial, later than the pool says a node is gone. At most
    `AGENT_SILENCE_MAX_S`: when only the node's side of the link is dead, its redial
    then lands while a rented pool's minute-long deadline still holds the run; a node
    that redials early loses nothing (its job and journal stay, the operator replays)."""
    return min(node_lost_after_s, AGENT_SILENCE_MAX_S)


@dataclass
class NodeHandle:
    """A provisioned node as the provider knows it; `offer` facts are shown on the board.

    `created_at` (epoch seconds, wall clock) is when the node began to bill: cost and the
    `max_hours` cap count from it, so both survive an engine restart (the handle is kept in
    the run index, and a rented node's time is also in the ledger)."""

    provider: str
    node_id: str
    price_per_hour: float | None = None
    offer: dict[str, str | float | int | None] = field(default_factory=dict)
    created_at: float | None = None


@dataclass(frozen=True)
class Preempted:
    """The provider took the node back on its own (an outbid or reclaimed interruptible
    instance). Not a fault of the node or the job: the run ends FAILED "preempted", which
    tells the operator (and a next attempt) that running again is the cure."""

    reason: str


@dataclass(frozen=True)
class Listed:
    """What the provider's listing says of a node that died (confirmed over a grace
    period), not what was seen of the node itself: its agent may still talk. `gone`: no
    longer listed at all — a listing that lags, if the agent talks; else listed dead
    (exited, stopped) — its files are pulled while the agent still answers."""

    reason: str
    gone: bool = False


class ProvisionError(Exception):
    """Provisioning failed; the message is one sanitized line for the run's reason."""


class PoolExhausted(ProvisionError):
    """This pool has nothing left for this run: no offer under its limits, every offer
    tried was taken or had no capacity, or (host pre-flight) every node tried failed it.
    The one seam of fall-over: raised out of `provision` (or the orchestrator's own work
    while it provisions) once this pool holds nothing of the run — its slot given back,
    its ledger rows closed — it moves the run to the pool's next `fallback` pool
    (engine/run/fallover.py); with none left the run fails naming each pool's reason."""


class TeardownError(Exception):
    """Teardown could not be confirmed; the node may still be billing."""


AlertSink = Callable[[Alert], None]


class Provider(Protocol):
    name: str

    async def provision(self, bootstrap: Bootstrap) -> NodeHandle:
        """Create the node and start the agent on it; return once it exists (not joined).

        If cancelled (the operator stopped the run while provisioning), the provider must
        release whatever it already created before re-raising CancelledError, or have it
        recorded (ledger) so teardown and `swjob gc` can find it.
        """
        ...

    def adopt(self, handle: NodeHandle) -> None:
        """Own a node that an earlier engine process provisioned (crash recovery), so that
        `teardown` and `node_exited` work on it as on one of ours."""
        ...

    async def find_node(self, run_id: str) -> NodeHandle | None:
        """A node created for `run_id` whose handle the engine never recorded (it died
        between the create call and writing the answer down), or None."""
        ...

    async def may_have_node(self, run_id: str) -> bool:
        """False only when no node was ever asked for `run_id` on this pool — no trace of
        one is left (a ledger intent, a node directory): its run never left the pool's
        queue, and an adopter may provision it from the start. When unsure, True."""
        ...

    async def teardown(self, handle: NodeHandle) -> None:
        """Destroy the node. Idempotent; raises TeardownError when it could not confirm."""
        ...

    def park(self, handle: NodeHandle) -> None:
        """The node stays warm after its run (engine/run/warm.py): let go of it without
        destroying it — its slot of the pool is given back; a Vast instance's ledger rows
        stay open (it bills on). A claim `adopt`s it again."""
        ...

    def forget(self, node_id: str) -> None:
        """The node was destroyed by someone else (gc, the board's collect) after its
        teardown here could not confirm it: let go of what this provider still holds for
        it — its slot of the pool's max_nodes, which every swjob process waits on."""
        ...

    def check_can_tear_down(self) -> None:
        """Raise TeardownError (one line) when this process lacks what destroying a node of
        this pool takes (e.g. the account's API key). Asked before a run is adopted: a
        process that could not end a node must not own it, or the node bills on unowned."""
        ...

    async def node_exited(self, handle: NodeHandle) -> str | Preempted | Listed:
        """Resolve with a reason when the provider sees the node die (or never, if it can't);
        `Preempted` when the provider itself took the node back, `Listed` when it no
        longer lists it. Not on one answer: a verdict must hold (engine/providers/hearsay.py)."""
        ...

    async def why_not_joined(self, handle: NodeHandle) -> str | None:
        """One look at a node whose agent did not join in time: what the provider can say
        of it (one line, for the boot timeout's reason), or None."""
        ...

    async def preemption(self, handle: NodeHandle) -> Preempted | None:
        """One look: did the provider take the node back? None when it did not (or has no
        such thing). Asked when the node went silent, to tell a preempted node from a dead one."""
        ...


async def ledger_note(
    alert: Callable[[str], None], what: str, write: Callable[..., object], *args: Any, **kwargs: Any
) -> object:
    """A ledger write about a node that exists (or existed), off the event loop: when
    another process holds the ledger it is said, not raised — the node is still ours to tear
    down, and its intent row, written first, names its label for `swjob gc`. `what` names
    the node's kind ("instance", "pod")."""
    try:
        return await asyncio.to_thread(write, *args, **kwargs)
    except StateNotWritten as exc:
        alert(f"{what} ledger not written ({exc}); `swjob gc` settles its rows later")
        return None


async def record_intent(
    ledger: Ledger, bootstrap: Bootstrap, provider: str, label: str, pool: str
) -> tuple[Bootstrap, int]:
    """Before a create: the ledger's intent row (raises StateNotWritten: a node nobody
    recorded could bill unseen) and `bootstrap` told the same moment as `billed_since`,
    the start both meters count from until the provider reports its own
    (agent/budget.billing_start). Returns the bootstrap to create with and the row."""
    since = time.time()
    entry = await asyncio.to_thread(
        ledger.record_intent, bootstrap.run_id, provider, label, pool=pool, at=since
    )
    return replace(bootstrap, billed_since=since), entry
