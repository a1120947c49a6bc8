"""One provider per pool, built when first needed. A rented pool's SDK is ~1 s of
imports: loaded in a thread while the engine starts, awaited by the first call that
needs it (`ready`), whose failure is that call's one-line error."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from engine.core.config import EngineConfig, SubmitError
from engine.jobs.pools import RENTED, Pool
from engine.providers import vast_sdk
from engine.providers.base import Provider
from engine.providers.registry import make_provider


class Providers:
    """The providers of `config`'s pools; `on_alert` hears what they retry or fear."""

    def __init__(self, config: EngineConfig, on_alert: Callable[[str], None]) -> None:
        self.config = config
        self.alert = on_alert
        self.built: dict[str, Provider] = {}
        self._sdk_loading: asyncio.Future[Any] | None = None

    def rents_nodes(self) -> bool:
        return any(p.provider in RENTED for p in self.config.pools)

    def preload(self) -> None:
        """Start loading the rented pools' SDK in a thread, while the rest starts."""
        if self.rents_nodes():
            self._sdk_loading = asyncio.ensure_future(asyncio.to_thread(vast_sdk.load))

    async def ready(self, pool: Pool) -> None:
        """Wait until `pool`'s provider can be built: a rented pool needs its SDK loaded.
        A failed import raises here, on the call that needed it, as one line."""
        if pool.provider != "vastai":
            return
        if self._sdk_loading is None:
            self._sdk_loading = asyncio.ensure_future(asyncio.to_thread(vast_sdk.load))
        try:
            await asyncio.shield(self._sdk_loading)
        except Exception as exc:
            raise SubmitError(f"pool {pool.name!r}: cannot load the Vast.ai SDK: {exc}") from None

    async def ready_pool(self, name: str) -> tuple[Pool, Provider]:
        """A configured pool and its provider, ready: where a run falls over to
        (engine/run/fallover.py)."""
        pool = self.config.pools.get(name)
        await self.ready(pool)
        return pool, self.get(pool)

    def get(self, pool: Pool) -> Provider:
        """One provider per configured pool; an adopted run whose pool was since renamed,
        removed or changed gets one of its own definition."""
        key = pool.name
        if pool.name not in self.config.pools or self.config.pools.get(pool.name) != pool:
            key = f"{pool.name} as adopted: {pool.model_dump_json()}"
        if key not in self.built:
            self.built[key] = make_provider(
                pool,
                stop_grace_s=self.config.stop_grace_s,
                on_alert=self.alert,
            )
        return self.built[key]

    async def all_ready(self) -> None:
        """Every pool's provider can be built (gc lists and destroys across all pools)."""
        for pool in self.config.pools:
            await self.ready(pool)
