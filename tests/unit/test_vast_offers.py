"""Pool designation → Vast.ai query, ordering and facts; the boot command (pure, no HTTP)."""

from __future__ import annotations

import shlex

from vastai.api.query import offers_alias, offers_fields, offers_mult, parse_query

from engine.jobs.pools import Pool
from engine.providers import vast_offers as vo
from engine.providers.base import Bootstrap
from engine.providers.vast_boot import label_for, onstart_command, operator_of, run_id_of
from engine.state.identity import operator_id


def pool(**resources: object) -> Pool:
    return Pool(
        name="p",
        provider="vastai",
        image="img",
        resources=resources or {"gpu_count": 1},
        selection={"max_price_per_hour": 0.6, "reliability_min": 0.98},
    )


def sdk_filters(p: Pool) -> dict:
    """What the SDK will send for our query string (its own parser, as search_offers does)."""
    query = vo.query_string(vo.clauses(p), verified_only=p.selection.verified_only)
    base = {"verified": {"eq": True}, "external": {"eq": False}, "rentable": {"eq": True}}
    return parse_query(query, base, offers_fields, offers_alias, offers_mult)


def test_every_requirement_becomes_the_filter_the_api_expects() -> None:
    p = pool(
        gpu_count=2,
        gpu_memory_mb=24000,
        accelerator_kind="RTX_4090",
        cpu_cores=8,
        memory_mb=64000,
        disk_mb=40500,
    )
    assert sdk_filters(p) == {
        "verified": {"eq": True},
        "external": {"eq": False},
        "rentable": {"eq": True},
        "num_gpus": {"eq": "2"},
        "gpu_ram": {"gte": 24000.0},
        "gpu_name": {"eq": "RTX 4090"},
        "cpu_cores_effective": {"gte": "8"},
        "cpu_ram": {"gte": 64000.0},
        "disk_space": {"gte": "41"},
        "dph_total": {"lte": "0.6"},
        "reliability": {"gte": "0.98"},
    }


def test_a_fixed_bid_asks_for_offers_whose_minimum_bid_it_meets() -> None:
    p = pool().model_copy(update={"interruptible": True, "bid_per_hour": 0.3})
    filters = sdk_filters(p)
    assert filters["min_bid"] == {"lte": "0.3"} and "dph_total" not in filters
    assert vo.offer_type(p) == "bid" and vo.offer_type(pool()) == "on-demand"
    offer = {"dph_total": 0.5, "min_bid": 0.25}
    assert vo.bid_for(p, offer) == vo.price_paid(p, offer) == 0.3 and vo.takes_bid(p, offer)
    assert not vo.takes_bid(p, {"dph_total": 0.5, "min_bid": 0.31})


def test_a_bid_node_bills_its_bid_plus_its_disks_storage() -> None:
    """Vast bills storage on top of a bid: metered at the bid alone, a bid pool read 3.7 %
    low in a probe. The offer's `storage_total_cost`, else what its total adds to its base."""
    p = pool().model_copy(update={"interruptible": True, "bid_per_hour": 0.3})
    listed = {"dph_total": 0.5, "dph_base": 0.45, "min_bid": 0.25, "storage_total_cost": 0.011}
    assert vo.price_paid(p, listed) == 0.311
    assert vo.price_paid(p, {"dph_total": 0.5, "dph_base": 0.45}) == 0.35
    assert vo.price_paid(pool(), listed) == 0.5  # on demand: the total holds it already


def test_a_fractional_bid_is_priced_per_offer_and_capped_through_the_on_demand_price() -> None:
    p = pool().model_copy(update={"interruptible": True, "bid_fraction": 0.5})
    assert sdk_filters(p)["dph_total"] == {"lte": "1.2"}, "a bid <= $0.60/h"
    offer = {"dph_total": 0.4, "min_bid": 0.2}
    assert vo.bid_for(p, offer) == 0.2 and vo.takes_bid(p, offer)
    assert not vo.takes_bid(p, {"dph_total": 0.4, "min_bid": 0.21})
    assert vo.node_facts(p, offer)["bid"] == 0.2 and "bid" not in vo.node_facts(pool(), offer)
    assert vo.bid_for(pool(), offer) is None and vo.price_paid(pool(), offer) == 0.4


def test_several_gpu_kinds_and_unverified_hosts() -> None:
    p = pool(gpu_count=1, accelerator_kind="RTX 4090, RTX_3090")
    p = p.model_copy(update={"selection": p.selection.model_copy(update={"verified_only": False})})
    filters = sdk_filters(p)
    assert filters["gpu_name"] == {"in": ["RTX 4090", "RTX 3090"]}
    assert "verified" not in filters  # the SDK's default is lifted, not kept


def test_clauses_are_named_by_requirement_in_pool_order() -> None:
    names = [c.requirement for c in vo.clauses(pool(gpu_count=1, gpu_memory_mb=8000))]
    assert names == ["gpu_count", "gpu_memory_mb", "max_price_per_hour", "reliability_min",
                     "verified_only"]  # fmt: skip


def test_orders_by_friendly_name_or_raw_and_sorts_best_first() -> None:
    offers = [
        {"id": 3, "dph_total": 0.5, "reliability": 0.99},
        {"id": 1, "dph_total": 0.2, "reliability": 0.95},
        {"id": 2, "dph_total": 0.2, "reliability": 0.999},
        {"id": 4, "reliability": 1.0},  # no price: last when sorting by price
    ]
    assert [o["id"] for o in vo.sort_offers(offers, vo.ORDERS["price"])] == [1, 2, 3, 4]
    assert [o["id"] for o in vo.sort_offers(offers, "dph_total,reliability-")] == [2, 1, 3, 4]
    assert [o["id"] for o in vo.sort_offers(offers, vo.ORDERS["reliability"])] == [4, 2, 3, 1]
    p = pool()
    assert vo.order_string(p) == "dph_total"
    raw = p.model_copy(update={"selection": p.selection.model_copy(update={"order": "score-"})})
    assert vo.order_string(raw) == "score-"


def test_offer_facts_and_disk_rounding() -> None:
    offer = {"id": 9, "gpu_name": "RTX 4090", "num_gpus": 1, "gpu_ram": 24564, "dph_total": 0.4}
    offer |= {"reliability": 0.99, "geolocation": "Sweden, SE", "machine_id": 5, "host_id": 6}
    facts = vo.offer_facts(offer)
    assert facts["dph"] == 0.4 and facts["offer_id"] == 9 and facts["geolocation"] == "Sweden, SE"
    assert vo.disk_gb(None) == 1 and vo.disk_gb(1000) == 1 and vo.disk_gb(1001) == 2
    assert vo.describe(offer) == "offer 9: 1× RTX 4090, $0.400/h, Sweden, SE"


def test_an_offer_vast_lists_with_null_price_and_gpu_is_not_described_as_free() -> None:
    offer = {"id": 9, "num_gpus": 1, "gpu_name": None, "dph_total": None, "geolocation": None}
    assert vo.describe(offer) == "offer 9: 1× GPU, price not listed"


def test_no_offer_reason_names_culprits_or_says_none_alone() -> None:
    clauses = vo.clauses(pool(gpu_count=1, gpu_memory_mb=96000))
    memory = [c for c in clauses if c.requirement == "gpu_memory_mb"]
    reason = vo.no_offer_reason("big", clauses, memory)
    assert "gpu_memory_mb (>= 96000 MB per GPU)" in reason and "'big'" in reason
    assert "relaxing any single requirement" in vo.no_offer_reason("big", clauses, [])


def test_boot_command_quotes_args_and_keeps_the_token_out() -> None:
    boot = Bootstrap(run_id="r1", ticket="tick;rm -rf /", orchestrator_id="abc", token="s3cret-tok")
    command = onstart_command(boot, "git+https://example.invalid/swjob@main")
    assert "s3cret-tok" not in command
    assert shlex.quote("tick;rm -rf /") in command
    assert "git+https://example.invalid/swjob@main" in command
    assert command.rstrip().endswith("&")  # returns at once; the agent runs in the background


def test_labels_round_trip() -> None:
    assert run_id_of(label_for("20260101-abcd")) == "20260101-abcd"
    assert operator_of(label_for("20260101-abcd")) == operator_id() != operator_of("swjob:x:r")
    assert (run_id_of("swjob:run-old"), operator_of("swjob:run-old")) == ("run-old", None)
    assert run_id_of("my-notebook") is None and run_id_of(None) is None
