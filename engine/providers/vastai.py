"""The Vast.ai provider: rent the best offer for a pool, boot the agent, never leak it.

Provision: search offers from the pool designation (vast_offers), then for the best
few: write the ledger intent, create the instance (image, disk, `swjob:<run_id>`
label, the join token in its env, the on-start command of vast_boot), write the id.
An offer rented away in the meantime → the next one. A create whose answer was lost
(timeout, 5xx) may still have created the instance, so before trying again the
provider looks for an instance carrying this run's label and adopts it.

Teardown: destroy, then verify with show_instance (None = gone), retried with
backoff; when it finally cannot confirm, TeardownError names the instance id and the
ledger row stays open for `swjob gc`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.providers import vast_offers as offers
from engine.providers.agent_source import agent_install_for
from engine.providers.base import (
    Bootstrap,
    NodeHandle,
    ProvisionError,
    TeardownError,
)
from engine.providers.vast_api import RetryPolicy, VastApi, VastApiError
from engine.providers.vast_boot import label_for, onstart_command
from engine.state.ledger import Ledger

if TYPE_CHECKING:
    from engine.jobs.pools import Pool

URL_ENV = "SWJOB_VAST_URL"
CREATE_TRIES = 3  # offers tried when the best ones are rented away under us
SEARCH_LIMIT = 20
DEAD_STATUSES = {"exited", "offline", "stopped"}


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
    ) -> None:
        self._pool = pool
        self._ledger = ledger
        self._server_url = server_url
        self._alert = on_alert or (lambda _message: None)
        self._policy = retry or RetryPolicy()
        self._poll_s = poll_s
        self._slots = asyncio.Semaphore(pool.max_nodes)
        self._adopted: dict[str, int] = {}
        self._entries: dict[str, int] = {}  # instance id → ledger entry
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
        await self._slots.acquire()
        try:
            return await self._provision(bootstrap)
        except VastApiError as exc:
            self._slots.release()
            raise ProvisionError(str(exc)) from None
        except BaseException:
            self._slots.release()
            raise

    async def _provision(self, bootstrap: Bootstrap) -> NodeHandle:
        agent_install_for(self._pool)  # no node is rented that could not install the agent
        candidates = await self._search()
        for offer in candidates[:CREATE_TRIES]:
            try:
                return await self._rent(offer, bootstrap)
            except _OfferGone:
                self._alert(f"Vast.ai offer {offer.get('id')} was rented away; trying the next")
        raise ProvisionError(
            f"Vast.ai: the {min(len(candidates), CREATE_TRIES)} best offers for pool "
            f"{self._pool.name!r} were all rented away before we could create an instance"
        )

    async def _search(self) -> list[dict[str, Any]]:
        clauses = offers.clauses(self._pool)
        found = await self._query(clauses)
        if found:
            return found
        culprits = [c for c in clauses if await self._query([x for x in clauses if x is not c])]
        raise ProvisionError(offers.no_offer_reason(self._pool.name, clauses, culprits))

    async def _query(self, clauses: list[offers.Clause]) -> list[dict[str, Any]]:
        order = offers.order_string(self._pool)
        query = offers.query_string(clauses, verified_only=self._pool.selection.verified_only)
        found = await self.api().call(
            "search offers",
            "search_offers",
            query=query,
            order=order,
            limit=SEARCH_LIMIT,
            storage=offers.disk_gb(self._pool.resources.disk_mb),
        )
        return offers.sort_offers(found or [], order)

    async def _rent(self, offer: dict[str, Any], bootstrap: Bootstrap) -> NodeHandle:
        label = label_for(bootstrap.run_id)
        entry = await asyncio.to_thread(
            self._ledger.record_intent, bootstrap.run_id, self.name, label, pool=self._pool.name
        )
        try:
            instance_id = await self._create_guarded(offer, bootstrap, label, entry)
        except (_OfferGone, VastApiError) as exc:
            if not getattr(exc, "transient", False):  # surely not created: close the row
                await asyncio.to_thread(self._ledger.record_destroyed, entry)
            raise
        self._entries[instance_id] = entry
        return NodeHandle(
            provider=self.name,
            node_id=instance_id,
            price_per_hour=offer.get("dph_total"),
            offer=offers.offer_facts(offer),
        )

    async def _create_guarded(
        self, offer: dict[str, Any], bootstrap: Bootstrap, label: str, entry: int
    ) -> str:
        """Create and record; if cancelled mid-call, wait for the answer and destroy."""
        creating = asyncio.ensure_future(self._create(offer, bootstrap, label))
        try:
            instance_id = await asyncio.shield(creating)
        except asyncio.CancelledError:
            instance_id = await _outcome(creating)
            if instance_id is not None:
                await asyncio.to_thread(self._ledger.record_created, entry, instance_id)
                with contextlib.suppress(VastApiError):  # else the open row is gc's to follow
                    await self._destroy_verified(instance_id)
                    await asyncio.to_thread(self._ledger.record_destroyed, entry)
            raise
        await asyncio.to_thread(self._ledger.record_created, entry, instance_id)
        return instance_id

    async def _create(self, offer: dict[str, Any], bootstrap: Bootstrap, label: str) -> str:
        """Create, retrying transient failures, but only after checking that the lost
        answer did not in fact create our instance (a second create would leak one)."""
        for attempt in range(self._policy.attempts - 1):
            try:
                return await self._create_once(offer, bootstrap, label)
            except VastApiError as error:
                if not error.transient:
                    raise
                adopted = await self._find_labelled(label)
                if adopted is not None:
                    self._alert(f"{error}; instance {adopted} was created anyway: adopting it")
                    return adopted
                await self.api().backoff(error, attempt)
        return await self._create_once(offer, bootstrap, label)

    async def _create_once(self, offer: dict[str, Any], bootstrap: Bootstrap, label: str) -> str:
        pool = self._pool
        try:
            answer = await self.api().once(
                f"create instance from offer {offer.get('id')}",
                "create_instance",
                id=offer["id"],
                image=pool.image,
                disk=offers.disk_gb(pool.resources.disk_mb),
                env=bootstrap.agent_env(),
                label=label,
                onstart_cmd=onstart_command(bootstrap, agent_install_for(pool)),
                ssh=True,
                cancel_unavail=True,
            )
        except VastApiError as error:
            if error.status in (400, 404, 410):
                raise _OfferGone(str(error)) from None
            raise
        if not isinstance(answer, dict) or not answer.get("new_contract"):
            raise _OfferGone(f"Vast.ai create instance from offer {offer.get('id')}: no contract")
        return str(answer["new_contract"])

    async def _find_labelled(self, label: str) -> str | None:
        rows = await self.api().call("show instances", "show_instances")
        ids = [str(r["id"]) for r in rows or [] if r.get("label") == label]
        return ids[0] if ids else None

    # ---- teardown -----------------------------------------------------------------------

    async def find_node(self, run_id: str) -> NodeHandle | None:
        """From the ledger (written before every create) or, when the create's answer was
        never recorded, from the instance carrying this run's label."""
        entries = await asyncio.to_thread(self._ledger.open_entries)
        mine = [e for e in entries if e.run_id == run_id]
        known = [e.instance_id for e in mine if e.instance_id]
        instance = known[0] if known else None
        if instance is None and mine:
            instance = await self._find_labelled(label_for(run_id))
        if instance is None:
            return None
        for entry in mine:
            if entry.instance_id in (None, instance):
                self._adopted[instance] = entry.entry
        return NodeHandle(provider=self.name, node_id=instance)

    def adopt(self, handle: NodeHandle) -> None:
        """A node an earlier engine process rented: teardown closes its ledger row too (no
        pool slot is taken for it; refusing to own a billing node would be worse)."""
        for entry in self._ledger.open_entries():
            if entry.instance_id == handle.node_id:
                self._adopted[handle.node_id] = entry.entry

    async def teardown(self, handle: NodeHandle) -> None:
        instance = handle.node_id
        try:
            await self._destroy_verified(instance)
        except VastApiError as exc:
            message = (
                f"could not confirm that Vast.ai instance {instance} is destroyed ({exc}); "
                f"it may still be billing: run `swjob gc`"
            )
            self._alert(message)
            raise TeardownError(message) from None
        entry = self._entries.pop(instance, None)
        if entry is not None:
            await asyncio.to_thread(self._ledger.record_destroyed, entry)
            self._slots.release()
        adopted = self._adopted.pop(instance, None)
        if adopted is not None:
            await asyncio.to_thread(self._ledger.record_destroyed, adopted)

    async def _destroy_verified(self, instance: str) -> None:
        api = self.api()
        failure = VastApiError(f"Vast.ai instance {instance} still listed after destroy")
        for attempt in range(self._policy.attempts):
            if attempt:
                await api.backoff(failure, attempt - 1)
            try:
                await api.once(f"destroy instance {instance}", "destroy_instance", int(instance))
            except VastApiError as error:
                if error.status != 404:  # 404: already gone, which the check below confirms
                    failure = error
                    continue
            if await self._gone(instance):
                return
            failure = VastApiError(f"Vast.ai instance {instance} still listed after destroy")
        raise failure

    async def _gone(self, instance: str) -> bool:
        row = await self.api().call(f"show instance {instance}", "show_instance", int(instance))
        return row is None

    # ---- liveness -----------------------------------------------------------------------

    async def node_exited(self, handle: NodeHandle) -> str:
        """Polls the instance; resolves when Vast says it died or vanished underneath us."""
        instance = handle.node_id
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                row = await self.api().once(
                    f"show instance {instance}", "show_instance", int(instance)
                )
            except VastApiError:
                continue  # a failed poll says nothing about the node
            if row is None:
                return f"Vast.ai instance {instance} was destroyed"
            status = row.get("actual_status")
            if status in DEAD_STATUSES:
                return f"Vast.ai instance {instance} is {status}"


async def _outcome(task: asyncio.Future[str]) -> str | None:
    """The result of a shielded call once it finishes, or None if it failed."""
    try:
        return await task
    except Exception:
        return None
