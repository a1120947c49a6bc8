"""The Vast.ai provider: rent the best offer for a pool, boot the agent, never leak it.

Provision: search offers from the pool designation (vast_offers), then for the best
few: write the ledger intent, create the instance (image, disk, `swjob:<run_id>`
label, the join token in its env, the on-start command of vast_boot), write the id.
An offer rented away in the meantime → the next one. A create whose answer was lost
(timeout, 5xx) or came without the instance's id may still have created the instance,
so before trying again the provider looks for an instance carrying this run's label and
adopts it.

Teardown: destroy (retried with backoff; `no_such_instance` counts as done), then
verify with show_instance — `{"instances": null}`, `[]` and a 404 all mean gone. Vast's
destroy is eventually consistent: an accepted destroy may stay listed for minutes, so
the run is not held up and no "may still be billing" alarm is raised; the ledger row
is marked destroy-requested, stays open, and a background task keeps confirming (and
re-asking) until the instance is gone, alarming only if it is still there after
`confirm_for_s`. When the destroy itself is refused to the end, TeardownError names
the instance id and the ledger row stays open for `swjob gc`.

Boot: the offer chosen and the instance created are marked as they happen, and while
the node comes up its status polls run faster and mark the image loading and the
container running (vast_status) for the run's boot timeline.

Prices: a node's price is the offer's `dph_total`, recorded in the ledger with its
creation time, so a restarted engine (or one that found the node by its label, where
the listing's `dph_total` is used) meters the same dollars.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agent.budget import billing_start, reported_start
from engine.providers import vast_offers as offers
from engine.providers.agent_source import agent_bundle, python_needed
from engine.providers.base import (
    Bootstrap,
    Listed,
    NodeHandle,
    PoolExhausted,
    Preempted,
    ProvisionError,
    TeardownError,
    ledger_note,
    record_intent,
)
from engine.providers.hearsay import Hearsay
from engine.providers.slots import Slots
from engine.providers.vast_api import RetryPolicy, VastApi, VastApiError
from engine.providers.vast_boot import AGENT_LOG, label_for, onstart_command
from engine.providers.vast_status import BootWatch, boot_poll_s
from engine.report import scope
from engine.report.events import BootPhase
from engine.state import badhosts
from engine.state.ledger import Ledger, LedgerEntry, billed_from
from engine.state.locked import StateNotWritten

if TYPE_CHECKING:
    from engine.jobs.pools import Pool

URL_ENV = "SWJOB_VAST_URL"
CREATE_TRIES = 3  # offers tried when the best ones are rented away under us
SEARCH_LIMIT = 20
# Not "offline" (nor "unknown"): Vast computes those from the host's missed heartbeats to
# its own servers, while the container may run on and its agent still talk to us. Whether
# the node is lost is the agent's silence to judge (the pool's node_lost_after_s).
DEAD_STATUSES = {"exited", "stopped"}
STOPPED_KEYS = ("cur_state", "next_state", "intended_status")  # all "stopped": preempted
CONFIRM_FOR_S = 900.0  # how long an accepted destroy may stay listed before we alarm
CONFIRM_EVERY_S = 15.0
CREATE_SETTLE_S = 5.0  # past a create request's timeout, its answer is in
LOOK_AGAIN_S = 2.0  # how often an adopter looks for an instance whose create may be in flight


_UNLISTED = "unlisted"


class _OfferGone(Exception):
    pass


def make_api(
    pool: Pool,
    *,
    server_url: str | None = None,
    retry: RetryPolicy | None = None,
    on_retry: Callable[[str], None] | None = None,
) -> VastApi:
    """A client for the pool's account: `server_url`, else $SWJOB_VAST_URL, else the SDK's."""
    return VastApi(
        api_key_env=pool.api_key_env,
        server_url=server_url or os.environ.get(URL_ENV) or None,
        policy=retry or RetryPolicy(),
        on_retry=on_retry or (lambda _message: None),
    )


class VastProvider:
    name = "vastai"

    def __init__(
        self,
        pool: Pool,
        ledger: Ledger,
        *,
        server_url: str | None = None,
        on_alert: Callable[[str], None] | None = None,
        retry: RetryPolicy | None = None,
        poll_s: float = 10.0,
        boot_poll: float | None = None,
        confirm_every_s: float = CONFIRM_EVERY_S,
        confirm_for_s: float = CONFIRM_FOR_S,
    ) -> None:
        self._pool = pool
        self._ledger = ledger
        self._server_url = server_url
        self._alert = on_alert or (lambda _message: None)
        self._policy = retry or RetryPolicy()
        self._poll_s = poll_s
        self._boot_poll_s = boot_poll or boot_poll_s()  # faster while a node comes up
        self._confirm_every_s = confirm_every_s
        self._confirm_for_s = confirm_for_s
        self._confirming: dict[str, asyncio.Task[None]] = {}
        self._slots = Slots(pool.max_nodes, pool.name, node_gone=self._node_gone)
        self._adopted: dict[str, int] = {}
        self._holding: set[str] = set()  # adopted instances that took a slot
        self._run_of: dict[str, str] = {}  # instance → the run whose slot it holds
        self._entries: dict[str, int] = {}  # instance id → ledger entry
        self._unreported: dict[str, int] = {}  # billed from its intent until Vast says → entry
        self._api: VastApi | None = None

    def api(self) -> VastApi:
        """The SDK client, made on first use so a missing key fails the run, not the engine."""
        if self._api is None:
            self._api = make_api(
                self._pool, server_url=self._server_url, retry=self._policy, on_retry=self._alert
            )
        return self._api

    # ---- provision ----------------------------------------------------------------------

    async def provision(self, bootstrap: Bootstrap) -> NodeHandle:
        await self._slots.take(bootstrap.run_id, self._alert)
        try:
            scope.boot_reached(BootPhase.SLOT_TAKEN)  # queueing ends, booting begins
            return await self._provision(bootstrap)
        except VastApiError as exc:
            self._slots.give_back(bootstrap.run_id)
            raise ProvisionError(str(exc)) from None
        except BaseException:
            self._slots.give_back(bootstrap.run_id)
            raise

    async def _provision(self, bootstrap: Bootstrap) -> NodeHandle:
        if self._pool.agent_install is None:  # built once, off the loop: ~0.1 s of zipping
            await asyncio.to_thread(agent_bundle)
        candidates = await self.search()
        for offer in candidates[:CREATE_TRIES]:
            try:
                return await self._rent(offer, bootstrap)
            except _OfferGone:
                self._alert(f"Vast.ai offer {offer.get('id')} was rented away; trying the next")
        raise PoolExhausted(
            f"Vast.ai: the {min(len(candidates), CREATE_TRIES)} best offers for pool "
            f"{self._pool.name!r} were all rented away before we could create an instance"
        )

    async def search(self, *, keep_bad: bool = False) -> list[dict[str, Any]]:
        """The offers this pool rents from, in its order (the first is the one a run takes,
        unless it is rented away meanwhile); PoolExhausted naming the requirement that
        found nothing, or the bid no offer takes. `swjob offers` shows the same list, with
        (`keep_bad`) the offers on hosts remembered as bad (engine/state/badhosts.py)."""
        clauses = offers.clauses(self._pool)
        found = await self._query(clauses)
        if found:
            taking = [o for o in found if offers.takes_bid(self._pool, o)]
            if not taking:
                raise PoolExhausted(offers.no_bid_reason(self._pool, found))
            return taking if keep_bad else await self._good_hosts(taking)
        culprits = [c for c in clauses if await self._query([x for x in clauses if x is not c])]
        raise PoolExhausted(offers.no_offer_reason(self._pool.name, clauses, culprits))

    async def _good_hosts(self, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`found` without the offers on hosts remembered as bad (`bad_host_ttl_h`)."""
        if self._pool.bad_host_ttl_h <= 0:
            return found
        bad = await asyncio.to_thread(badhosts.machines, self.name)
        good = [o for o in found if str(o.get("machine_id")) not in bad]
        if not good:
            raise PoolExhausted(
                f"every Vast.ai offer for pool {self._pool.name!r} is on a host remembered "
                "as bad: `swjob hosts` lists them, `swjob hosts forget --all` clears"
            )
        return good

    async def _query(self, clauses: list[offers.Clause]) -> list[dict[str, Any]]:
        order = offers.order_string(self._pool)
        query = offers.query_string(clauses, verified_only=self._pool.selection.verified_only)
        found = await self.api().call(
            "search offers",
            "search_offers",
            query=query,
            type=offers.offer_type(self._pool),
            order=order,
            limit=SEARCH_LIMIT,
            storage=offers.disk_gb(self._pool.resources.disk_mb),
        )
        return offers.sort_offers(found or [], order)

    async def _rent(self, offer: dict[str, Any], bootstrap: Bootstrap) -> NodeHandle:
        label = label_for(bootstrap.run_id)
        try:
            bootstrap, entry = await record_intent(
                self._ledger, bootstrap, self.name, label, self._pool.name
            )
        except StateNotWritten as exc:  # an instance nobody recorded could bill unseen
            raise ProvisionError(
                f"instance ledger not written ({exc}): no instance was created"
            ) from None
        scope.boot_reached(BootPhase.OFFER_CHOSEN, offers.describe(offer))
        try:
            instance_id, created_at = await self._create_guarded(offer, bootstrap, label, entry)
        except (_OfferGone, VastApiError) as exc:
            if not getattr(exc, "transient", False):  # surely not running: close the row
                left = self._pool.interruptible and await self._sweep_refused_bid(label, entry)
                if not left:
                    await self._note(self._ledger.record_destroyed, entry)
            raise
        self._entries[instance_id] = entry
        self._unreported[instance_id] = entry
        self._run_of[instance_id] = bootstrap.run_id
        scope.boot_reached(BootPhase.INSTANCE_CREATED, f"Vast.ai instance {instance_id}")
        return NodeHandle(
            provider=self.name,
            node_id=instance_id,
            price_per_hour=offers.price_paid(self._pool, offer),
            offer=offers.node_facts(self._pool, offer),
            created_at=created_at,
        )

    async def _note(self, write: Callable[..., object], *args: Any, **kwargs: Any) -> object:
        return await ledger_note(self._alert, "instance", write, *args, **kwargs)

    async def _sweep_refused_bid(self, label: str, entry: int) -> bool:
        """A bid Vast refused can still leave an instance behind, stopped, billing its
        storage: find it by the run's label and destroy it. True when one is left that
        could not be destroyed: its ledger row stays open for `swjob gc`."""
        row = await self._labelled_row(label)
        if row is None:
            return False
        instance = str(row["id"])
        await self._note(self._ledger.record_created, entry, instance)
        self._alert(f"the refused bid left Vast.ai instance {instance} behind; destroying it")
        try:
            await self._destroy_verified(instance)
        except VastApiError as error:
            self._alert(f"could not destroy Vast.ai instance {instance} ({error}): run `swjob gc`")
            return True
        return False

    async def _create_guarded(
        self, offer: dict[str, Any], bootstrap: Bootstrap, label: str, entry: int
    ) -> tuple[str, float]:
        """Create and record (id, price, birth); if cancelled mid-call, wait for the answer
        and destroy. Returns the instance id and when it began to bill."""
        creating = asyncio.ensure_future(self._create(offer, bootstrap, label))
        price = offers.price_paid(self._pool, offer)
        try:
            instance_id = await asyncio.shield(creating)
        except asyncio.CancelledError:
            instance_id = await _outcome(creating)
            if instance_id is not None:
                await self._note(
                    self._ledger.record_created, entry, instance_id, price_per_hour=price
                )
                with contextlib.suppress(VastApiError):  # else the open row is gc's to follow
                    await self._destroy_verified(instance_id)
                    await self._note(self._ledger.record_destroyed, entry)
            raise
        created_at = await self._note(
            self._ledger.record_created, entry, instance_id, price_per_hour=price
        )
        return instance_id, created_at if isinstance(created_at, float) else time.time()

    async def _create(self, offer: dict[str, Any], bootstrap: Bootstrap, label: str) -> str:
        """Create, retrying transient failures, but only after checking that the lost
        answer did not in fact create our instance (a second create would leak one). A
        retry refused because the offer is rented may have been refused for our own lost
        create, answered since: that instance is ours, not a reason to rent the next offer."""
        lost: VastApiError | None = None  # a create whose answer was lost
        lost_at = 0.0
        for attempt in itertools.count():
            refused: _OfferGone | None = None
            try:
                return await self._create_once(offer, bootstrap, label)
            except _OfferGone as gone:
                if lost is None:
                    raise
                refused = gone
            except VastApiError as error:
                if not error.transient or attempt == self._policy.attempts - 1:
                    raise
                lost, lost_at = error, time.time()
            # refused: our lost create may be what rented the offer, and Vast's listing
            # catches up in its own time — look until that create's answer is surely in
            settled_at = lost_at + CREATE_SETTLE_S if refused is not None else 0.0
            row = await self._labelled_row_by(label, settled_at)
            adopted = str(row["id"]) if row else None
            if adopted is not None:
                self._alert(f"{lost}; instance {adopted} was created anyway: adopting it")
                return adopted
            if refused is not None:
                raise refused
            await self.api().backoff(lost, attempt)

    async def _create_once(self, offer: dict[str, Any], bootstrap: Bootstrap, label: str) -> str:
        pool = self._pool
        bootstrap = replace(
            bootstrap,
            on_orphan=self._on_orphan(),
            price_per_hour=offers.price_paid(pool, offer),
        )
        self.api().hide(bootstrap.agent_env().values())
        what = f"create instance from offer {offer.get('id')}"
        try:
            answer = await self.api().once(
                what,
                "create_instance",
                id=offer["id"],
                image=pool.image,
                disk=offers.disk_gb(pool.resources.disk_mb),
                env=bootstrap.agent_env(),
                label=label,
                onstart_cmd=onstart_command(bootstrap, pool.agent_install),
                price=offers.bid_for(pool, offer),
                ssh=True,
                cancel_unavail=True,
            )
            if (refused := self.api().refusal(what, answer)) is not None:
                raise refused  # Vast said no in a 200: judged as its 400s are, below
        except VastApiError as error:
            # Only `no_such_ask` (or a missing offer) means it was taken; any other refusal
            # is a request Vast will not take — its message says why, and the next offer
            # won't help.
            if error.code == "no_such_ask" or error.status in (404, 410):
                raise _OfferGone(str(error)) from None
            raise
        if not isinstance(answer, dict) or not answer.get("new_contract"):
            # Accepted, yet without the instance's id: like a lost answer it may well have
            # created one, which _create looks for by its label before asking again — read
            # as the offer rented away, the next offer was rented and this one left billing
            raise VastApiError(f"Vast.ai {what}: accepted without an instance id", transient=True)
        return str(answer["new_contract"])

    def _on_orphan(self) -> tuple[str, ...]:
        """An orphaned node destroys its own instance with the container's scoped key, on
        the API this provider talks to (the stand-in in tests; Vast's own by default)."""
        url = self._server_url or os.environ.get(URL_ENV)
        return ("--on-orphan", "destroy-instance", *(("--vast-url", url) if url else ()))

    async def _created_row(self, intent: LedgerEntry) -> dict[str, Any] | None:
        """The instance carrying the label of `intent`'s run. Its create may have been sent
        just before the engine that sent it died, and Vast may still answer it: until that
        request's timeout has passed since the intent, no instance is not yet an answer —
        look again, rather than leave one that appears later billing unowned."""
        label = intent.label or label_for(intent.run_id)
        settled_at = intent.intent_at + self._policy.timeout_s + CREATE_SETTLE_S
        return await self._labelled_row_by(label, settled_at)

    async def _labelled_row_by(self, label: str, settled_at: float) -> dict[str, Any] | None:
        """The instance carrying `label`, looked for again until epoch `settled_at`."""
        while (row := await self._labelled_row(label)) is None and time.time() < settled_at:
            await asyncio.sleep(min(LOOK_AGAIN_S, settled_at - time.time()))
        return row

    async def _labelled_row(self, label: str) -> dict[str, Any] | None:
        rows = await self.api().call("show instances", "show_instances")
        found = [r for r in rows or [] if r.get("label") == label]
        return found[0] if found else None

    # ---- teardown -----------------------------------------------------------------------

    async def find_node(self, run_id: str) -> NodeHandle | None:
        """From the ledger (written before every create) or, when the create's answer was
        never recorded, from the instance carrying this run's label."""
        entries = await asyncio.to_thread(self._ledger.open_entries)
        mine = [e for e in entries if e.run_id == run_id]
        known = [e for e in mine if e.instance_id]
        handle = _handle_from(known[0]) if known else None
        if handle is None and mine:  # the newest intent's create is the last to answer (an
            # earlier one is left open when its close could not be written)
            newest = max(mine, key=lambda e: e.intent_at)
            row = await self._created_row(newest)
            if row is not None:  # price and birth from Vast's own listing
                handle = NodeHandle(
                    provider=self.name,
                    node_id=str(row["id"]),
                    price_per_hour=row.get("dph_total"),
                    created_at=billing_start(reported_start(row), newest.intent_at),
                )
            else:  # its create's answer is surely in and made none: the intent is settled
                # (left open, every later start-up warned of an orphan that never existed)
                await self._close_rows([e.entry for e in mine])
        if handle is None:
            return None
        for entry in mine:
            if entry.instance_id in (None, handle.node_id):
                self._adopted[handle.node_id] = entry.entry
                self._birth_from(handle, entry)
        self._hold(handle.node_id, run_id)
        return handle

    async def may_have_node(self, run_id: str) -> bool:
        """Ledger.asked_for on this pool; an unreadable ledger cannot tell."""
        try:
            return await asyncio.to_thread(self._ledger.asked_for, run_id, self._pool.name)
        except (sqlite3.Error, OSError):
            return True

    def adopt(self, handle: NodeHandle) -> None:
        """A node an earlier engine process rented: teardown closes its ledger row too. It
        takes a pool slot without waiting for one (refusing to own a billing node would be
        worse). What the handle lacks of its price and birth, the ledger row supplies."""
        run_id = ""
        for entry in self._ledger.open_entries():
            if entry.instance_id == handle.node_id:
                self._adopted[handle.node_id] = entry.entry
                run_id = entry.run_id
                self._birth_from(handle, entry)
                if handle.price_per_hour is None:
                    handle.price_per_hour = entry.price_per_hour
        self._hold(handle.node_id, run_id)

    def _birth_from(self, handle: NodeHandle, entry: LedgerEntry) -> None:
        """`handle`'s billing start from its ledger row, unless it counts from a warm claim:
        the row's start is Vast's once reported (the handle's, saved before, may still be
        the intent's); one still the intent's is replaced at the next listing that reports
        a start (`_reported`)."""
        handle.created_at = billed_from(handle.created_at, entry)
        if handle.created_at == entry.intent_at:
            self._unreported[handle.node_id] = entry.entry

    async def _reported(self, handle: NodeHandle, row: dict[str, Any]) -> None:
        """The first listing that reports the instance's start (Vast's `start_date`): both
        meters count from it (agent/budget.billing_start), this one from now on, an adopter
        from the ledger."""
        start = reported_start(row)
        entry = self._unreported.get(handle.node_id)
        if start is None or entry is None:
            return
        await self._note(self._ledger.record_started, entry, start)
        self._unreported.pop(handle.node_id, None)
        handle.created_at = start

    def _hold(self, instance: str, run_id: str) -> None:
        """An adopted instance takes a slot of max_nodes without waiting for one, so the
        runs queued here wait for it too (engine/providers/slots.py)."""
        if instance not in self._entries and instance not in self._holding:
            self._holding.add(instance)
            self._run_of[instance] = run_id
            self._slots.hold(run_id)

    def park(self, handle: NodeHandle) -> None:
        """The instance stays warm: its slot is given back, its ledger rows stay open (it
        bills on, and a claim or gc finds it there)."""
        self._release(handle.node_id)

    async def _node_gone(self, run_id: str) -> bool:
        """Whether the node of `run_id`, whose operator died holding a slot of this pool,
        is gone: every instance its open ledger rows name unlisted on two looks (a node
        that gave up on its own leaves its row open). A row whose create may still answer
        (no instance id yet) is no proof. Its rows stay open for gc, which ends its run."""
        rows = [e for e in await asyncio.to_thread(self._ledger.open_entries) if e.run_id == run_id]
        if any(e.instance_id is None for e in rows):
            return False
        try:
            for look in range(2):
                await asyncio.sleep(self._boot_poll_s if look else 0)
                for entry in rows:
                    if not await self._gone_now(str(entry.instance_id)):
                        return False
        except VastApiError:
            return False
        return True

    def forget(self, instance: str) -> None:
        """gc destroyed the instance and closed its ledger rows: free its pool slot."""
        self._release(instance)

    def check_can_tear_down(self) -> None:
        """Destroying an instance takes the account's API key: without it, say so."""
        try:
            self.api()
        except VastApiError as exc:
            raise TeardownError(f"cannot destroy its Vast.ai instance: {exc}") from None

    async def teardown(self, handle: NodeHandle) -> None:
        instance = handle.node_id
        gone = await self.destroy(instance)
        rows = self._release(instance)
        if gone:
            await self._close_rows(rows)
        else:  # accepted, still listed: Vast catches up in its own time
            for row in rows:
                await self._note(self._ledger.record_destroy_requested, row)
            self._confirm_in_background(instance, rows)

    async def destroy(self, instance: str) -> bool:
        """Ask Vast to destroy `instance`, then look once: True when Vast no longer lists
        it, False when the destroy was accepted and Vast still lists it (eventually
        consistent: it settles in its own time). Its ledger rows are the caller's. Raises
        TeardownError when the destroy was not accepted."""
        try:
            await self._destroy(instance)
        except VastApiError as exc:
            # said once, by whoever tore it down (a run's persistent alert, gc's report):
            # an alert here as well printed it twice
            raise TeardownError(
                f"could not confirm that Vast.ai instance {instance} is destroyed ({exc}); "
                f"it may still be billing: run `swjob gc`"
            ) from None
        return await self._gone_now(instance)

    def _release(self, instance: str) -> list[int]:
        """Forget the instance (freeing its pool slot); returns its open ledger rows."""
        rows = []
        self._unreported.pop(instance, None)
        entry = self._entries.pop(instance, None)
        run_id = self._run_of.pop(instance, "")
        if entry is not None:
            rows.append(entry)
            self._slots.give_back(run_id)
        if instance in self._holding:
            self._holding.discard(instance)
            self._slots.give_back(run_id)
        adopted = self._adopted.pop(instance, None)
        if adopted is not None:
            rows.append(adopted)
        return rows

    async def _close_rows(self, rows: list[int]) -> None:
        for row in rows:
            await self._note(self._ledger.record_destroyed, row)

    async def _destroy(self, instance: str) -> None:
        """Ask Vast to destroy, retrying refusals and transient failures with backoff;
        an instance that is already gone counts as destroyed."""
        api, what = self.api(), f"destroy instance {instance}"
        for attempt in range(self._policy.attempts):
            try:
                refused = api.refusal(what, await api.once(what, "destroy_instance", int(instance)))
                if refused is None:
                    return
                raise refused  # a 200 without success: Vast's CLI, too, reads it as refused
            except VastApiError as error:
                if error.gone or error.code == "no_such_instance":
                    return
                if attempt == self._policy.attempts - 1:
                    raise
                await api.backoff(error, attempt)

    async def _destroy_verified(self, instance: str) -> None:
        """Destroy and wait (within the retry policy) until the listing agrees."""
        await self._destroy(instance)
        for attempt in range(self._policy.attempts):
            if await self._gone_now(instance):
                return
            await asyncio.sleep(self._policy.delay(attempt))
        raise VastApiError(f"Vast.ai instance {instance} still listed after destroy")

    async def _gone_now(self, instance: str) -> bool:
        """One look: True when Vast no longer lists the instance (null or 404)."""
        try:
            row = await self.api().call(f"show instance {instance}", "show_instance", int(instance))
        except VastApiError as error:
            if error.gone:
                return True
            raise
        return row is None

    def _confirm_in_background(self, instance: str, rows: list[int]) -> None:
        """Keep confirming an accepted destroy; the run has moved on. Runs outside the run's
        context (its alerts are engine-wide: the run may be long finished)."""
        if instance in self._confirming:
            return
        task = asyncio.get_running_loop().create_task(
            self._confirm(instance, rows), context=contextvars.Context()
        )
        self._confirming[instance] = task
        task.add_done_callback(lambda _t: self._confirming.pop(instance, None))

    async def _confirm(self, instance: str, rows: list[int]) -> None:
        deadline = time.monotonic() + self._confirm_for_s
        while time.monotonic() < deadline:
            await asyncio.sleep(self._confirm_every_s)
            with contextlib.suppress(VastApiError):
                if await self._gone_now(instance):
                    await self._close_rows(rows)
                    return
                await self._destroy(instance)  # asking again is harmless
        self._alert(
            f"Vast.ai instance {instance} is still listed {self._confirm_for_s:g} s after its "
            "destroy was accepted; it may still be billing: run `swjob gc`"
        )

    # ---- liveness -----------------------------------------------------------------------

    async def node_exited(self, handle: NodeHandle) -> str | Preempted | Listed:
        """Polls the instance; resolves when Vast says it died or vanished underneath us —
        said on consecutive lookups over the pool's `node_lost_after_s` (hearsay.py): one
        odd answer of an eventually consistent listing is no death — or (an interruptible
        node) that Vast took it back."""
        instance = handle.node_id
        boot = BootWatch()
        hearsay = Hearsay(self._pool.node_lost_after_s)
        while True:
            fast = not boot.done or hearsay.suspected
            # at least twice within the pool's grace, so a verdict can be confirmed in it
            every = min(self._poll_s, self._pool.node_lost_after_s / 2)
            await asyncio.sleep(min(self._boot_poll_s, every) if fast else every)
            try:
                row = await self.api().once(
                    f"show instance {instance}", "show_instance", int(instance)
                )
            except VastApiError as error:
                if error.gone and hearsay.heard(_UNLISTED) is not None:
                    return Listed(f"Vast.ai instance {instance} was destroyed", gone=True)
                continue  # a failed poll says nothing about the node
            if row is None:
                if hearsay.heard(_UNLISTED) is not None:
                    return Listed(f"Vast.ai instance {instance} was destroyed", gone=True)
                continue
            await self._reported(handle, row)
            for step, detail in boot.observe(row):
                scope.boot_reached(step, detail)
            if (failed := boot.start_failed(row)) is not None:
                return f"Vast.ai instance {instance} could not start its image: {failed}"
            taken = self._taken_back(instance, row)
            if taken is not None:
                return taken
            status = row.get("actual_status")
            dead = status in DEAD_STATUSES
            said = f"Vast.ai instance {instance} is {status}" + _said(row) if dead else None
            if (verdict := hearsay.heard(said)) is not None:
                return Listed(verdict)

    async def why_not_joined(self, handle: NodeHandle) -> str | None:
        """What Vast lists of an instance whose agent never joined: still coming up (and
        what it is doing), or running — then its on-start could not start the agent, which
        it installs with the image's python3 (uv or pip): a bare image has none, an older
        python3 cannot. The install's output is in the instance's agent.log (vast_boot)."""
        instance = handle.node_id
        try:
            row = await self.api().once(f"show instance {instance}", "show_instance", int(instance))
        except VastApiError:
            return None
        if row is None:
            return None
        status = row.get("actual_status")
        if status != "running":
            return f"Vast.ai instance {instance} is {status or 'being provisioned'}" + _said(row)
        return (
            f"Vast.ai instance {instance} runs, but its agent never joined: the on-start "
            f"installs it with the image's python3 ({python_needed()}, with pip or uv), "
            f"which this image may lack; its output is in {AGENT_LOG} on the instance"
        )

    async def preemption(self, handle: NodeHandle) -> Preempted | None:
        """One look at the instance: was it taken back? (A failed look raises.)"""
        if not self._pool.interruptible:
            return None
        instance = handle.node_id
        row = await self.api().once(f"show instance {instance}", "show_instance", int(instance))
        return self._taken_back(instance, row) if row else None

    def _taken_back(self, instance: str, row: dict[str, Any]) -> Preempted | None:
        """Vast stops an outbid interruptible instance: current, next and intended state
        all read "stopped", though swjob never stops a node it watches."""
        if not self._pool.interruptible or any(row.get(k) != "stopped" for k in STOPPED_KEYS):
            return None
        return Preempted(f"Vast.ai stopped interruptible instance {instance}" + _said(row))


def _said(row: dict[str, Any]) -> str:
    """Vast's status_msg, as the tail of a reason."""
    said = str(row.get("status_msg") or "").strip()[:200]
    return f": {said}" if said else ""


async def _outcome(task: asyncio.Future[str]) -> str | None:
    """The result of a shielded call once it finishes, or None if it failed."""
    try:
        return await task
    except Exception:
        return None


def _handle_from(entry: LedgerEntry) -> NodeHandle:
    """A node rebuilt from its ledger row: id, price and birth survive the engine."""
    assert entry.instance_id is not None
    return NodeHandle(
        provider=entry.provider,
        node_id=entry.instance_id,
        price_per_hour=entry.price_per_hour,
        created_at=entry.created_at,
    )
