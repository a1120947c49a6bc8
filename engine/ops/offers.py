"""`swjob offers POOL`: what a pool would rent, before anything is rented (`sky show-gpus`,
`dstack offer`, `vastai search offers`): the offers its resources and selection match,
cheapest first, and the one `swjob run` would take — the first in the pool's `order`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from engine.errors import ProviderError
from engine.jobs.pools import Pool
from engine.providers.base import ProvisionError


class OffersError(Exception):
    """Why a pool's offers cannot be listed, in one line."""


@dataclass(frozen=True)
class OfferView:
    offer_id: int | str | None
    price_per_hour: float | None  # what a run pays: the bid on an interruptible pool
    gpu_name: str | None
    num_gpus: int | None
    gpu_ram_gb: float | None  # per GPU
    reliability: float | None
    location: str | None
    chosen: bool  # the one `swjob run` would take now
    bad_host: bool = False  # on a host remembered as bad: left out (`swjob hosts`)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def list_offers(pool: Pool) -> list[OfferView]:
    if pool.provider == "local":
        raise OffersError(f"pool {pool.name!r} is this machine: there is nothing to rent")
    if pool.provider == "runpod":
        return await _runpod_offers(pool)
    from engine.providers import vast_offers
    from engine.providers.vastai import VastProvider
    from engine.state import badhosts
    from engine.state.ledger import Ledger

    try:
        found = await VastProvider(pool, Ledger()).search(keep_bad=True)
    except (ProvisionError, ProviderError) as exc:
        raise OffersError(str(exc)) from None
    bad = badhosts.machines(VastProvider.name) if pool.bad_host_ttl_h > 0 else set()
    good = [offer for offer in found if str(offer.get("machine_id")) not in bad]
    views = [
        OfferView(
            offer_id=offer.get("id"),
            price_per_hour=vast_offers.price_paid(pool, offer),
            gpu_name=offer.get("gpu_name"),
            num_gpus=offer.get("num_gpus"),
            gpu_ram_gb=_gb(offer.get("gpu_ram")),
            reliability=offer.get("reliability"),
            location=offer.get("geolocation"),
            chosen=bool(good) and offer is good[0],
            bad_host=offer not in good,
        )
        for offer in found
    ]
    return sorted(views, key=lambda v: (v.price_per_hour is None, v.price_per_hour or 0.0))


async def _runpod_offers(pool: Pool) -> list[OfferView]:
    """A RunPod pool's GPU types × clouds (runpod_offers), in the order a run tries them."""
    from engine.providers import runpod_offers
    from engine.providers.runpod_provider import RunPodProvider
    from engine.state.ledger import Ledger

    try:
        found = await RunPodProvider(pool, Ledger()).search()
    except (ProvisionError, ProviderError) as exc:
        raise OffersError(str(exc)) from None
    return [
        OfferView(
            offer_id=offer["id"],
            price_per_hour=runpod_offers.price_paid(pool, offer),
            gpu_name=offer["gpu_name"],
            num_gpus=offer["gpu_count"],
            gpu_ram_gb=offer.get("memory_gb"),
            reliability=None,
            location=f"{offer['cloud'].lower()} cloud",
            chosen=index == 0,
        )
        for index, offer in enumerate(found)
    ]


def _gb(mb: Any) -> float | None:
    return round(mb / 1000, 1) if isinstance(mb, int | float) else None
