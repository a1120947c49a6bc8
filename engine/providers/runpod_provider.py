"""The RunPod provider: rent a pod for a pool, boot the agent in it, never leak it.

Provision: list the GPU types with their prices (runpod_offers), then for each offer in
order: write the ledger intent, create the pod (named `swjob:<operator>:<run>` as a
Vast instance is labelled, so gc and a restarted engine find it), write its id. RunPod
answering that it has no machine for an offer → the next offer; none left → one line.
A create whose answer was lost may still have made the pod: it is looked for by name.

Boot: RunPod has no on-start script. The pod's start command (`dockerArgs`, which
replaces the image's CMD and keeps its ENTRYPOINT) runs the same boot as a Vast
on-start (vast_boot), base64-wrapped (the SDK puts the string between GraphQL quotes
as it is), then keeps the container up. The join token travels in the pod's env. Its
steps, for the boot timeline: pod created (the create's answer), image loading (listed
RUNNING without a `runtime`; looked at once, then every `boot_poll_s`), container running
(a `runtime`); the agent's install and join come from the agent. A step that came and
went between two looks is inferred at the join (engine/run/bootmarks.py).

Teardown: terminate (retried; a pod already gone counts), then look: gone → the ledger
rows close; still listed (RunPod lists a terminated pod for a while) → the rows are
marked destroy-requested and stay open for `swjob gc` to settle.

Prices: an on-demand pod's $/h is the GPU type's price × GPUs; a spot pod's the bid.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from engine.providers import runpod_offers as offers
from engine.providers.agent_source import agent_bundle
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
from engine.providers.runpod_api import URL_ENV, RunPodApi, RunPodApiError, gpu_types, rent_spot
from engine.providers.slots import Slots
from engine.providers.vast_api import RetryPolicy
from engine.providers.vast_boot import label_for, onstart_command
from engine.report import scope
from engine.report.events import BootPhase
from engine.state.ledger import Ledger
from engine.state.locked import StateNotWritten

if TYPE_CHECKING:
    from engine.jobs.pools import Pool

KEEP_UP = "exec sleep infinity"  # the start command's boot backgrounds the agent
GONE_STATUSES = {"TERMINATED"}
DEAD_STATUSES = {"EXITED", "TERMINATED"}


def start_command(bootstrap: Bootstrap, agent_install: str | None) -> str:
    """The pod's `dockerArgs`: the Vast on-start boot, base64 so that no quote or
    backslash reaches the SDK's unescaped GraphQL string, then stay up."""
    boot = base64.b64encode(onstart_command(bootstrap, agent_install).encode()).decode()
    return f"bash -c 'echo {boot} | base64 -d | bash; {KEEP_UP}'"


class RunPodProvider:
    name = "runpod"

    def __init__(
        self,
        pool: Pool,
        ledger: Ledger,
        *,
        on_alert: Callable[[str], None] | None = None,
        retry: RetryPolicy | None = None,
        poll_s: float = 10.0,
        boot_poll_s: float = 2.0,
    ) -> None:
        self._pool = pool
        self._ledger = ledger
        self._alert = on_alert or (lambda _message: None)
        self._policy = retry or RetryPolicy()
        self._poll_s = poll_s
        self._boot_poll_s = boot_poll_s
        self._slots = Slots(pool.max_nodes, pool.name)
        self._rows: dict[str, list[int]] = {}  # pod id → its open ledger rows
        self._run_of: dict[str, str] = {}  # pod id → the run whose slot it holds
        self._api: RunPodApi | None = None

    def api(self) -> RunPodApi:
        """Made on first use, so a missing key fails the run, not the engine."""
        if self._api is None:
            self._api = RunPodApi(self._pool.api_key_env, policy=self._policy, on_retry=self._alert)
        return self._api

    # ---- provision ----------------------------------------------------------------------

    async def provision(self, bootstrap: Bootstrap) -> NodeHandle:
        await self._slots.take(bootstrap.run_id, self._alert)
        try:
            scope.boot_reached(BootPhase.SLOT_TAKEN)
            return await self._provision(bootstrap)
        except RunPodApiError as exc:
            self._slots.give_back(bootstrap.run_id)
            raise ProvisionError(str(exc)) from None
        except BaseException:
            self._slots.give_back(bootstrap.run_id)
            raise

    async def _provision(self, bootstrap: Bootstrap) -> NodeHandle:
        if self._pool.agent_install is None:
            await asyncio.to_thread(agent_bundle)
        candidates = await self.search()
        full: list[str] = []
        for offer in candidates:
            try:
                return await self._rent(offer, bootstrap)
            except RunPodApiError as error:
                if not error.no_capacity:
                    raise
                full.append(offers.describe(offer))
                self._alert(f"RunPod has no {offers.describe(offer)} free; trying the next")
        raise PoolExhausted(
            f"RunPod pool {self._pool.name!r}: no capacity for any of its offers "
            f"({'; '.join(full)})"
        )

    async def search(self) -> list[dict[str, Any]]:
        """The pool's offers in the order a run tries them; PoolExhausted naming the
        limit that left none. `swjob offers` shows the same list."""
        types = await self.api().call("list GPU types", gpu_types)
        found = offers.offers_of(self._pool, types)
        found = [o for o in found if offers.takes_bid(self._pool, o)]
        if not found:
            raise PoolExhausted(offers.no_offer_reason(self._pool, types))
        return found

    async def _rent(self, offer: dict[str, Any], bootstrap: Bootstrap) -> NodeHandle:
        label = label_for(bootstrap.run_id)
        try:  # RunPod reports no start: both meters count from the intent (agent/budget.py)
            bootstrap, entry = await record_intent(
                self._ledger, bootstrap, self.name, label, self._pool.name
            )
        except StateNotWritten as exc:
            raise ProvisionError(f"pod ledger not written ({exc}): no pod was created") from None
        scope.boot_reached(BootPhase.OFFER_CHOSEN, offers.describe(offer))
        price = offers.price_paid(self._pool, offer)
        try:
            pod_id = await self._create(offer, bootstrap, label)
        except RunPodApiError as error:
            if not error.transient:
                await self._note(self._ledger.record_destroyed, entry)
            raise
        created_at = await self._note(
            self._ledger.record_created, entry, pod_id, price_per_hour=price
        )
        self._rows[pod_id] = [entry]
        self._run_of[pod_id] = bootstrap.run_id
        scope.boot_reached(BootPhase.INSTANCE_CREATED, f"RunPod pod {pod_id}")
        return NodeHandle(
            provider=self.name,
            node_id=pod_id,
            price_per_hour=price,
            offer=offers.node_facts(self._pool, offer),
            created_at=created_at if isinstance(created_at, float) else time.time(),
        )

    async def _create(self, offer: dict[str, Any], bootstrap: Bootstrap, label: str) -> str:
        """Create once; a lost answer (transport failure) may have made the pod: look for
        it by name before saying so."""
        try:
            return await self._create_once(offer, bootstrap, label)
        except RunPodApiError as error:
            if not error.transient:
                raise
            found = await self._named(label)
            if found is None:
                raise
            self._alert(f"{error}; pod {found['id']} was created anyway: adopting it")
            return str(found["id"])

    async def _create_once(self, offer: dict[str, Any], bootstrap: Bootstrap, label: str) -> str:
        pool = self._pool
        bootstrap = replace(
            bootstrap,
            on_orphan=self._on_orphan(),
            price_per_hour=offers.price_paid(pool, offer),
        )
        env = bootstrap.agent_env()
        self.api().hide(list(env.values()))
        fields: dict[str, Any] = {
            "name": label,
            "imageName": pool.image,
            "gpuTypeId": offer["gpu_type_id"],
            "cloudType": offer["cloud"],
            "gpuCount": offer["gpu_count"],
            "volumeInGb": pool.volume_gb,
            "containerDiskInGb": pool.container_disk_gb,
            "dockerArgs": start_command(bootstrap, pool.agent_install),
        }
        if pool.data_center:
            fields["dataCenterId"] = pool.data_center
        what = f"create pod ({offers.describe(offer)})"
        if pool.interruptible:  # the SDK has no bid: its own transport, swjob's mutation
            fields["bidPerGpu"] = offers.bid_per_gpu(pool, offer)
            pod = await self.api().once(what, rent_spot, fields, env)
        else:
            pod = await self.api().once(
                what,
                "create_pod",
                name=label,
                image_name=pool.image,
                gpu_type_id=offer["gpu_type_id"],
                cloud_type=offer["cloud"],
                data_center_id=pool.data_center,
                gpu_count=offer["gpu_count"],
                volume_in_gb=pool.volume_gb,
                container_disk_in_gb=pool.container_disk_gb,
                docker_args=fields["dockerArgs"],
                env=env,
                support_public_ip=False,
                start_ssh=False,
            )
        if not isinstance(pod, dict) or not pod.get("id"):
            raise RunPodApiError(f"RunPod {what}: accepted without a pod id", transient=True)
        return str(pod["id"])

    def _on_orphan(self) -> tuple[str, ...]:
        """An orphaned pod terminates itself with its own pod-scoped key, on the API this
        provider talks to (the stand-in in tests)."""

        url = os.environ.get(URL_ENV)
        return ("--on-orphan", "terminate-pod", *(("--runpod-url", url) if url else ()))

    async def _note(self, write: Callable[..., object], *args: Any, **kwargs: Any) -> object:
        return await ledger_note(self._alert, "pod", write, *args, **kwargs)

    async def pods(self) -> list[dict[str, Any]]:
        """The account's pods RunPod still runs or bills (a TERMINATED one is gone)."""
        pods = await self.api().call("list pods", "get_pods")
        return [p for p in pods or [] if p.get("desiredStatus") not in GONE_STATUSES]

    async def _named(self, label: str) -> dict[str, Any] | None:
        found = [p for p in await self.pods() if p.get("name") == label]
        return found[0] if found else None

    # ---- ownership ----------------------------------------------------------------------

    async def find_node(self, run_id: str) -> NodeHandle | None:
        """From the ledger, or the pod carrying this run's name."""
        mine = [e for e in await asyncio.to_thread(self._ledger.open_entries) if e.run_id == run_id]
        if not mine:
            return None
        known = [e for e in mine if e.instance_id]
        if known:
            e = known[0]
            assert e.instance_id is not None
            handle = NodeHandle(self.name, e.instance_id, e.price_per_hour, created_at=e.created_at)
        else:
            pod = await self._named(mine[-1].label or label_for(run_id))
            if pod is None:
                for e in mine:
                    await self._note(self._ledger.record_destroyed, e.entry)
                return None
            handle = NodeHandle(
                self.name, str(pod["id"]), pod.get("costPerHr"), created_at=mine[-1].intent_at
            )
        self._hold(handle.node_id, run_id, [e.entry for e in mine])
        return handle

    async def may_have_node(self, run_id: str) -> bool:
        """Ledger.asked_for on this pool; an unreadable ledger cannot tell."""
        try:
            return await asyncio.to_thread(self._ledger.asked_for, run_id, self._pool.name)
        except Exception:
            return True

    def adopt(self, handle: NodeHandle) -> None:
        rows, run_id = [], ""
        for entry in self._ledger.open_entries():
            if entry.instance_id == handle.node_id:
                rows.append(entry.entry)
                run_id = entry.run_id
                handle.created_at = handle.created_at or entry.created_at
                handle.price_per_hour = handle.price_per_hour or entry.price_per_hour
        self._hold(handle.node_id, run_id, rows)

    def _hold(self, pod_id: str, run_id: str, rows: list[int]) -> None:
        if pod_id not in self._rows:
            self._rows[pod_id] = rows
            self._run_of[pod_id] = run_id
            self._slots.hold(run_id)

    def park(self, handle: NodeHandle) -> None:
        self._release(handle.node_id)

    def forget(self, node_id: str) -> None:
        self._release(node_id)

    def _release(self, pod_id: str) -> list[int]:
        rows = self._rows.pop(pod_id, None)
        run_id = self._run_of.pop(pod_id, "")
        if rows is not None:
            self._slots.give_back(run_id)
        return rows or []

    def check_can_tear_down(self) -> None:
        try:
            self.api()
        except RunPodApiError as exc:
            raise TeardownError(f"cannot terminate its RunPod pod: {exc}") from None

    # ---- teardown -----------------------------------------------------------------------

    async def teardown(self, handle: NodeHandle) -> None:
        pod_id = handle.node_id
        gone = await self.destroy(pod_id)
        rows = self._release(pod_id)
        for row in rows:
            write = self._ledger.record_destroyed if gone else self._ledger.record_destroy_requested
            await self._note(write, row)

    async def destroy(self, pod_id: str) -> bool:
        """Terminate, then look for a while: True once RunPod no longer lists the pod (or
        lists it TERMINATED), False when it still does. TeardownError when refused."""
        try:
            with contextlib.suppress(RunPodApiError):
                if await self._gone_now(pod_id):
                    return True
            await self.api().call(f"terminate pod {pod_id}", "terminate_pod", pod_id)
        except RunPodApiError as exc:
            raise TeardownError(
                f"could not confirm that RunPod pod {pod_id} is terminated ({exc}); "
                "it may still be billing: run `swjob gc`"
            ) from None
        for attempt in range(self._policy.attempts):
            with contextlib.suppress(RunPodApiError):
                if await self._gone_now(pod_id):
                    return True
            await asyncio.sleep(self._policy.delay(attempt))
        return False

    async def _pod(self, pod_id: str) -> dict[str, Any] | None:
        return await self.api().once(f"look up pod {pod_id}", "get_pod", pod_id)

    async def _gone_now(self, pod_id: str) -> bool:
        pod = await self._pod(pod_id)
        return pod is None or pod.get("desiredStatus") in GONE_STATUSES

    # ---- liveness -----------------------------------------------------------------------

    async def node_exited(self, handle: NodeHandle) -> str | Preempted | Listed:
        """Polls the pod; resolves when RunPod says it is gone or exited (held over the
        pool's node_lost_after_s), or took a spot pod back. Marks the boot's steps."""
        pod_id = handle.node_id
        hearsay = Hearsay(self._pool.node_lost_after_s)
        running = looked = False
        while True:
            every = min(self._poll_s, self._pool.node_lost_after_s / 2)
            fast = not running or hearsay.suspected
            if looked:  # the first look at once: a pod may be up before a poll's pause ends
                await asyncio.sleep(min(self._boot_poll_s, every) if fast else every)
            looked = True
            try:
                pod = await self._pod(pod_id)
            except RunPodApiError:
                continue
            if pod is None:
                if hearsay.heard("unlisted") is not None:
                    return Listed(f"RunPod pod {pod_id} was terminated", gone=True)
                continue
            if not running:
                running = _boot_step(pod)
            taken = self._taken_back(pod_id, pod)
            if taken is not None:
                return taken
            status = pod.get("desiredStatus")
            said = (
                f"RunPod pod {pod_id} is {status}{_tail(pod)}" if status in DEAD_STATUSES else None
            )
            if (verdict := hearsay.heard(said)) is not None:
                return Listed(verdict)

    async def why_not_joined(self, handle: NodeHandle) -> str | None:
        """What RunPod lists of a pod whose agent never joined, in its own words."""
        try:
            pod = await self._pod(handle.node_id)
        except RunPodApiError:
            return None
        if pod is None:
            return None
        if not pod.get("runtime"):
            return f"RunPod pod {handle.node_id} never came up{_tail(pod)}"
        return (
            f"RunPod pod {handle.node_id} runs, but its agent never joined: its start "
            "command installs it with the image's python3; its output is in "
            "$HOME/swjob/agent.log on the pod"
        )

    async def preemption(self, handle: NodeHandle) -> Preempted | None:
        if not self._pool.interruptible:
            return None
        pod = await self._pod(handle.node_id)
        return self._taken_back(handle.node_id, pod) if pod else None

    def _taken_back(self, pod_id: str, pod: dict[str, Any]) -> Preempted | None:
        """RunPod stops an outbid spot pod: EXITED, though swjob never stops a pod."""
        if not self._pool.interruptible or pod.get("desiredStatus") != "EXITED":
            return None
        return Preempted(f"RunPod stopped spot pod {pod_id}{_tail(pod)}")


def _boot_step(pod: dict[str, Any]) -> bool:
    """Mark what a look at a booting pod shows; True once its container runs. RunPod
    says no more than this: a pod it runs (`desiredStatus` RUNNING) whose `runtime` is
    still null is pulling its image and starting its container; a runtime means it is up."""
    if pod.get("runtime"):
        scope.boot_reached(BootPhase.CONTAINER_RUNNING, _said(pod))
        return True
    if pod.get("desiredStatus") == "RUNNING":
        scope.boot_reached(BootPhase.IMAGE_LOADING, _said(pod))
    return False


def _said(pod: dict[str, Any]) -> str | None:
    said = str(pod.get("lastStatusChange") or "").strip()[:200]
    return said or None


def _tail(pod: dict[str, Any]) -> str:
    said = _said(pod)
    return f": {said}" if said else ""
