"""A RunPod pool's offers: GPU types × clouds, priced, filtered by the pool, cheapest first.

RunPod sells no single machines to pick from: a pod asks for a GPU type (`gpuTypeId`),
a count and a cloud (Secure or Community), and RunPod finds a machine — or answers that
none is free. So an "offer" here is one GPU type in one cloud that the pool allows, with
its on-demand and spot price per GPU; the provider tries them in order until a create
finds capacity. Stock is what the listing says: a cloud whose flag (`secureCloud`,
`communityCloud`) is false has none of the type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.jobs.pools import Pool

CLOUDS = {"secure": ("SECURE",), "community": ("COMMUNITY",), "all": ("SECURE", "COMMUNITY")}
_PRICE = {"SECURE": "securePrice", "COMMUNITY": "communityPrice"}
_SPOT = {"SECURE": "secureSpotPrice", "COMMUNITY": "communitySpotPrice"}
_FLAG = {"SECURE": "secureCloud", "COMMUNITY": "communityCloud"}


def gpu_count(pool: Pool) -> int:
    return max(pool.resources.gpu_count, 1)


def offers_of(pool: Pool, types: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The offers of `types` this pool may rent, cheapest (what a run pays) first."""
    found = []
    for gpu in types:
        if not _fits(pool, gpu):
            continue
        for cloud in CLOUDS[pool.cloud_type]:
            price = gpu.get(_PRICE[cloud])
            if not gpu.get(_FLAG[cloud]) or not isinstance(price, int | float) or price <= 0:
                continue
            offer = {
                "id": f"{gpu['id']}/{cloud.lower()}",
                "gpu_type_id": gpu["id"],
                "gpu_name": gpu.get("displayName") or gpu["id"],
                "memory_gb": gpu.get("memoryInGb"),
                "cloud": cloud,
                "gpu_count": gpu_count(pool),
                "price_per_gpu": float(price),
                "spot_per_gpu": gpu.get(_SPOT[cloud]),
            }
            if pool.interruptible and not isinstance(offer["spot_per_gpu"], int | float):
                continue  # no spot market for this type here
            found.append(offer)
    # a fixed bid pays the same everywhere: then the cheapest market first (least outbid)
    found.sort(key=lambda o: (price_paid(pool, o), o["spot_per_gpu"] or o["price_per_gpu"]))
    cap = pool.selection.max_price_per_hour
    return [o for o in found if cap is None or price_paid(pool, o) <= cap + 1e-9]


def _fits(pool: Pool, gpu: dict[str, Any]) -> bool:
    r = pool.resources
    if pool.gpu_types and gpu.get("id") not in pool.gpu_types:
        return False
    if (gpu.get("maxGpuCount") or 1) < gpu_count(pool):
        return False
    if r.gpu_memory_mb and (gpu.get("memoryInGb") or 0) * 1000 < r.gpu_memory_mb * 0.97:
        return False  # 24 GB cards list 24 GB; a 24000 MB ask must find them
    if r.accelerator_kind:
        name = f"{gpu.get('id')} {gpu.get('displayName')}".lower().replace(" ", "_")
        kinds = [k.strip().lower().replace(" ", "_") for k in r.accelerator_kind.split(",")]
        return any(k and k in name for k in kinds)
    return True


def bid_per_gpu(pool: Pool, offer: dict[str, Any]) -> float | None:
    """A spot pod's bid per GPU: the pool's $/h bid split over the GPUs, or its fraction of
    the on-demand price; never under the spot price (RunPod would refuse it)."""
    if not pool.interruptible:
        return None
    if pool.bid_per_hour is not None:
        bid = pool.bid_per_hour / offer["gpu_count"]
    else:
        bid = (pool.bid_fraction or 1.0) * offer["price_per_gpu"]
    return round(bid, 4)


def takes_bid(pool: Pool, offer: dict[str, Any]) -> bool:
    bid = bid_per_gpu(pool, offer)
    return bid is None or bid >= float(offer["spot_per_gpu"]) - 1e-9


def price_paid(pool: Pool, offer: dict[str, Any]) -> float:
    """$/h for the whole pod: the bid on a spot pod, else the on-demand price."""
    per_gpu = bid_per_gpu(pool, offer)
    return round((offer["price_per_gpu"] if per_gpu is None else per_gpu) * offer["gpu_count"], 4)


def describe(offer: dict[str, Any]) -> str:
    return f"{offer['gpu_count']}× {offer['gpu_name']} ({offer['cloud'].lower()} cloud)"


def node_facts(pool: Pool, offer: dict[str, Any]) -> dict[str, str | float | int | None]:
    return {
        "offer_id": offer["id"],
        "gpu_name": offer["gpu_name"],
        "num_gpus": offer["gpu_count"],
        "cloud": offer["cloud"].lower(),
        "dph_total": price_paid(pool, offer),
    }


def no_offer_reason(pool: Pool, types: list[dict[str, Any]]) -> str:
    """One line: which of the pool's limits left nothing."""
    name = f"RunPod pool {pool.name!r}"
    fitting = [g for g in types if _fits(pool, g)]
    if not fitting:
        return f"{name}: no GPU type matches its gpu_types/resources"
    clouds = CLOUDS[pool.cloud_type]
    if not any(g.get(_FLAG[c]) for g in fitting for c in clouds):
        return f"{name}: none of its GPU types is in stock in the {pool.cloud_type} cloud"
    if pool.interruptible:
        return f"{name}: no spot offer under its limits takes its bid"
    cap = pool.selection.max_price_per_hour
    return f"{name}: no offer at or under selection.max_price_per_hour ${cap:g}/h"
