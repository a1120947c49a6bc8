"""`swjob offers POOL` and `swjob pools`: print what engine/ops/offers.py and
engine/ops/poolcheck.py found."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys


def offers(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from engine.jobs.pools import load_pools
    from engine.ops.offers import OffersError, list_offers

    pool = load_pools(args.pools).get(args.pool)
    try:
        found = asyncio.run(list_offers(pool))
    except OffersError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([o.as_dict() for o in found], indent=2))
        return 0
    table = Table("", "offer", "$/h", "GPU", "VRAM", "reliability", "location")
    for o in found:
        table.add_row(
            "*" if o.chosen else "bad host" if o.bad_host else "",
            str(o.offer_id),
            _price(o.price_per_hour),
            f"{o.num_gpus}× {o.gpu_name or 'GPU'}",
            "" if o.gpu_ram_gb is None else f"{o.gpu_ram_gb:g} GB",
            "" if o.reliability is None else f"{o.reliability:.3f}",
            o.location or "",
        )
    Console(highlight=False).print(table)
    chosen = next((o for o in found if o.chosen), None)
    if chosen is None:
        print("every offer is on a host remembered as bad: `swjob hosts forget --all` clears")
        return 1
    print(f"* swjob run would take offer {chosen.offer_id} ({_price(chosen.price_per_hour)} $/h)")
    return 0


def _price(dollars: float | None) -> str:
    return "not listed" if dollars is None else f"{dollars:.3f}"


def pools(args: argparse.Namespace) -> int:
    from engine.jobs.pools import load_pools
    from engine.ops.poolcheck import PoolCheck, check_pool

    found = load_pools(args.pools)  # a file that does not parse: one line, exit 1
    where = found.source or "no pools file: the built-in pool only"
    print(f"pools: {where}")

    async def check_all() -> list[PoolCheck]:
        return await asyncio.gather(*(check_pool(pool) for pool in found))

    failed = 0
    for check in asyncio.run(check_all()):
        mark = "ok" if check.ok else "FAILED"
        failed += not check.ok
        print(f"  {check.name} ({check.provider}) {check.summary}: {mark} — {check.note}")
    return 1 if failed else 0
