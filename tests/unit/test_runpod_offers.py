"""RunPod offers (engine/providers/runpod_offers.py): GPU types × clouds filtered by the
pool, priced as a run pays (the bid on a spot pool), and the one-line reason for none."""

from __future__ import annotations

from engine.providers import runpod_offers as offers
from tests.standin.runpod_server import GPU_TYPES
from tests.support.runpod import pod_pool


def _ids(pool_changes: dict) -> list[str]:
    return [o["id"] for o in offers.offers_of(pod_pool(**pool_changes), GPU_TYPES)]


def test_offers_are_types_in_stock_per_cloud_cheapest_first_under_the_cap() -> None:
    assert _ids({}) == ["NVIDIA GeForce RTX 3090/community", "NVIDIA GeForce RTX 4090/community"]
    uncapped = {"selection": {}}
    assert _ids(uncapped | {"cloud_type": "secure"}) == [
        "NVIDIA GeForce RTX 4090/secure",
        "NVIDIA RTX A6000/secure",  # no RTX 3090 in the secure cloud: out of stock there
    ]
    assert _ids(uncapped | {"gpu_types": ("NVIDIA RTX A6000",)}) == ["NVIDIA RTX A6000/secure"]
    big = {"resources": {"gpu_count": 1, "gpu_memory_mb": 48000}}
    assert _ids(uncapped | big) == ["NVIDIA RTX A6000/secure"]
    kinds = {"resources": {"gpu_count": 1, "accelerator_kind": "RTX_4090"}}
    assert _ids(uncapped | kinds) == [
        "NVIDIA GeForce RTX 4090/community",
        "NVIDIA GeForce RTX 4090/secure",
    ]
    eight = {"resources": {"gpu_count": 8}}  # an RTX 3090 machine has at most 4
    assert "NVIDIA GeForce RTX 3090/community" not in _ids(uncapped | eight)


def test_a_spot_pool_pays_its_bid_split_over_the_gpus() -> None:
    pool = pod_pool(interruptible=True, bid_per_hour=0.5, resources={"gpu_count": 2}, selection={})
    [rtx3090, *_] = offers.offers_of(pool, GPU_TYPES)
    assert offers.bid_per_gpu(pool, rtx3090) == 0.25 and offers.price_paid(pool, rtx3090) == 0.5
    assert offers.takes_bid(pool, rtx3090)  # over its $0.11 spot price

    def taken(fraction: float) -> list[str]:
        pool = pod_pool(interruptible=True, bid_fraction=fraction, selection={})
        return [o["id"] for o in offers.offers_of(pool, GPU_TYPES) if offers.takes_bid(pool, o)]

    assert taken(0.4) == []  # under every spot price
    # 52 %: over the spot price of the community RTX 3090 ($0.11 of $0.22) and the secure
    # RTX 4090 ($0.35 of $0.69), under the community RTX 4090's and the A6000's
    assert taken(0.52) == ["NVIDIA GeForce RTX 3090/community", "NVIDIA GeForce RTX 4090/secure"]


def test_no_offer_says_which_limit_left_none() -> None:
    assert "no GPU type matches" in offers.no_offer_reason(
        pod_pool(gpu_types=("NVIDIA H100",)), GPU_TYPES
    )
    a6000 = {"gpu_types": ("NVIDIA RTX A6000",)}
    out = offers.no_offer_reason(pod_pool(cloud_type="community", **a6000), GPU_TYPES)
    assert out == "RunPod pool 'pod': none of its GPU types is in stock in the community cloud"
    capped = offers.no_offer_reason(pod_pool(**a6000), GPU_TYPES)
    assert capped.endswith("no offer at or under selection.max_price_per_hour $0.6/h")
