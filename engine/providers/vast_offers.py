"""From a pool designation to Vast.ai offers: the search query, the ordering, the pick.

A pool's requirements become one clause each of the SDK's query language (which the
SDK turns into the REST filter: `gpu_ram>=24` is sent as 24000 MB, `RTX_4090` as
"RTX 4090"). Keeping the clauses named by the requirement they come from is what
lets a search that finds nothing say *which* requirement is to blame: the provider
re-queries with one clause left out at a time (`culprits`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.providers.vast_sdk import parse_order

if TYPE_CHECKING:
    from engine.jobs.pools import Pool

# Friendly orderings a pool may name; anything else is passed to the SDK as its own
# order syntax ("dph_total", "score-", "dlperf_usd-,reliability-").
ORDERS = {
    "price": "dph_total",
    "cheapest": "dph_total",
    "reliability": "reliability-",
    "score": "score-",
    "performance": "dlperf-",
    "value": "dlperf_usd-",
}
DEFAULT_ORDER = "price"


@dataclass(frozen=True)
class Clause:
    """One requirement of the pool as a query clause, with words for an error message."""

    requirement: str
    query: str
    wants: str


def _gb(mb: float) -> str:
    return f"{mb / 1000:g}"


def _gpu_name(kind: str) -> str:
    """`RTX 4090` → `RTX_4090`: the SDK's query language splits on spaces."""
    names = [n.strip().replace(" ", "_") for n in kind.split(",") if n.strip()]
    return f"gpu_name in [{','.join(names)}]" if len(names) > 1 else f"gpu_name={names[0]}"


def _resource_clauses(res: Any) -> list[Clause]:
    out: list[Clause] = []
    if res.gpu_count:
        out.append(Clause("gpu_count", f"num_gpus={res.gpu_count}", f"{res.gpu_count} GPU(s)"))
    if res.gpu_memory_mb:
        mb = res.gpu_memory_mb
        out.append(Clause("gpu_memory_mb", f"gpu_ram>={_gb(mb)}", f">= {mb} MB per GPU"))
    if res.accelerator_kind:
        kind = res.accelerator_kind
        out.append(Clause("accelerator_kind", _gpu_name(kind), f"GPU {kind}"))
    if res.cpu_cores:
        n = res.cpu_cores
        out.append(Clause("cpu_cores", f"cpu_cores_effective>={n}", f">= {n} CPU cores"))
    if res.memory_mb:
        mb = res.memory_mb
        out.append(Clause("memory_mb", f"cpu_ram>={_gb(mb)}", f">= {mb} MB RAM"))
    if res.disk_mb:
        gb = disk_gb(res.disk_mb)
        out.append(Clause("disk_mb", f"disk_space>={gb}", f">= {gb} GB disk"))
    return out


def _price_clauses(pool: Pool) -> list[Clause]:
    """On demand, the price is the listing's; a bid pool pays its bid, so a fixed bid asks
    for offers whose minimum bid it meets, and a fractional bid stays under the price cap
    through the on-demand price it is a fraction of."""
    cap = pool.selection.max_price_per_hour
    if pool.interruptible and pool.bid_per_hour is not None:
        bid = pool.bid_per_hour
        return [Clause("bid_per_hour", f"min_bid<={bid:g}", f"a minimum bid <= ${bid:g}/h")]
    if cap is None:
        return []
    if pool.interruptible and pool.bid_fraction is not None:
        top = cap / pool.bid_fraction
        return [Clause("max_price_per_hour", f"dph_total<={top:g}", f"a bid <= ${cap:g}/h")]
    return [Clause("max_price_per_hour", f"dph_total<={cap:g}", f"<= ${cap:g}/h")]


def _selection_clauses(sel: Any) -> list[Clause]:
    out: list[Clause] = []
    if sel.reliability_min is not None:
        r = sel.reliability_min
        out.append(Clause("reliability_min", f"reliability>={r:g}", f"reliability >= {r:g}"))
    if sel.verified_only:
        out.append(Clause("verified_only", "verified=true", "a verified host"))
    return out


def clauses(pool: Pool) -> list[Clause]:
    """Every requirement of the pool that narrows the search, in the pool's own order."""
    price = _price_clauses(pool)
    return _resource_clauses(pool.resources) + price + _selection_clauses(pool.selection)


def offer_type(pool: Pool) -> str:
    """The SDK's offer type: interruptible pools search the bid market."""
    return "bid" if pool.interruptible else "on-demand"


def bid_for(pool: Pool, offer: dict[str, Any]) -> float | None:
    """What the pool bids for `offer` in $/h; None for an on-demand pool."""
    if not pool.interruptible:
        return None
    if pool.bid_per_hour is not None:
        return pool.bid_per_hour
    assert pool.bid_fraction is not None  # the pools file insists on one of the two
    return round(pool.bid_fraction * _num(offer.get("dph_total")), 4)


def price_paid(pool: Pool, offer: dict[str, Any]) -> float | None:
    """The $/h the node bills: the listing's total, or when bidding the bid plus the disk's
    storage (Vast bills storage on top of a bid; the total already holds it)."""
    bid = bid_for(pool, offer)
    return round(bid + storage_per_hour(offer), 6) if bid is not None else offer.get("dph_total")


def storage_per_hour(offer: dict[str, Any]) -> float:
    """The $/h of the offer's disk as searched for: Vast's `storage_total_cost`, else what
    its total adds to the base price (0 when neither is listed)."""
    listed = offer.get("storage_total_cost")
    if isinstance(listed, int | float) and math.isfinite(listed):
        return max(0.0, float(listed))
    total, base = offer.get("dph_total"), offer.get("dph_base")
    if isinstance(total, int | float) and isinstance(base, int | float):
        return max(0.0, float(total) - float(base))
    return 0.0


def takes_bid(pool: Pool, offer: dict[str, Any]) -> bool:
    """A bid below the offer's minimum would only buy a stopped instance; a fraction of a
    price Vast lists as null is no bid at all."""
    bid = bid_for(pool, offer)
    return bid is None or (math.isfinite(bid) and bid >= _num(offer.get("min_bid") or 0))


def no_bid_reason(pool: Pool, found: list[dict[str, Any]]) -> str:
    """One line for a fractional bid that none of the matching offers `found` accepts."""
    said = f"no Vast.ai offer for pool {pool.name!r} takes its bid: bid_fraction"
    if not any(math.isfinite(_num(o.get("dph_total"))) for o in found):
        return f"{said}: no matching offer lists the on-demand price (dph_total) to bid on"
    return (
        f"{said} {pool.bid_fraction:g} of the on-demand price is below every matching "
        "offer's minimum bid"
    )


def query_string(parts: list[Clause], *, verified_only: bool) -> str:
    """The SDK query. Unless the pool insists on verified hosts, the SDK's default
    `verified=true` filter is lifted (`verified=any`) so the pool's words rule."""
    words = [c.query for c in parts]
    if not verified_only:
        words.append("verified=any")
    return " ".join(words)


def disk_gb(disk_mb: int | None) -> int:
    """Vast sizes disks in whole GB; round up so the pool gets at least what it asked."""
    return max(1, math.ceil((disk_mb or 0) / 1000))


def order_string(pool: Pool) -> str:
    order = pool.selection.order or DEFAULT_ORDER
    return ORDERS.get(order, order)


def sort_offers(offers: list[dict[str, Any]], order: str) -> list[dict[str, Any]]:
    """Best first, by the same ordering the search was asked for (the server's order is
    not trusted to be stable, and ties are broken by offer id for determinism)."""
    result = sorted(offers, key=lambda o: o.get("id", 0))
    for field, direction in reversed(parse_order(order)):
        result.sort(key=lambda o, f=field: _num(o.get(f)), reverse=direction == "desc")
    return result


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.inf


def offer_facts(offer: dict[str, Any]) -> dict[str, str | float | int | None]:
    """The chosen offer as the run records and the board shows it."""
    return {
        "gpu_name": offer.get("gpu_name"),
        "num_gpus": offer.get("num_gpus"),
        "gpu_ram_mb": offer.get("gpu_ram"),
        "dph": offer.get("dph_total"),
        "reliability": offer.get("reliability"),
        "geolocation": offer.get("geolocation"),
        "offer_id": offer.get("id"),
        "machine_id": offer.get("machine_id"),
        "host_id": offer.get("host_id"),
    }


def describe(offer: dict[str, Any]) -> str:
    """The offer in one line, for the boot timeline: `offer 103: 1× RTX 3090, $0.220/h, US`."""
    where = f", {offer['geolocation']}" if offer.get("geolocation") else ""
    price = _num(offer.get("dph_total"))  # Vast may list it as null: not $0
    return (
        f"offer {offer.get('id')}: {offer.get('num_gpus')}× {offer.get('gpu_name') or 'GPU'}, "
        + (f"${price:.3f}/h" if math.isfinite(price) else "price not listed")
        + where
    )


def node_facts(pool: Pool, offer: dict[str, Any]) -> dict[str, str | float | int | None]:
    """The offer's facts, plus the bid for an interruptible node."""
    facts = offer_facts(offer)
    bid = bid_for(pool, offer)
    if bid is not None:
        facts["bid"] = bid
    return facts


def no_offer_reason(pool_name: str, all_clauses: list[Clause], culprits: list[Clause]) -> str:
    """One line for the run's FAILED reason that names the requirement that found nothing."""
    if not culprits:
        wanted = ", ".join(c.wants for c in all_clauses) or "any GPU"
        return (
            f"no Vast.ai offer for pool {pool_name!r}: nothing matches {wanted} together, "
            "and relaxing any single requirement does not help"
        )
    names = "; ".join(f"{c.requirement} ({c.wants})" for c in culprits)
    return (
        f"no Vast.ai offer for pool {pool_name!r}: nothing meets {names} "
        "together with the pool's other requirements"
    )
