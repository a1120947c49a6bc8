"""`swjob nodes`: the warm nodes this operator keeps, and `swjob nodes release` to end them.

A warm node bills while it idles (docs/warm-nodes.md): this is where the operator sees
each one — pool, node, idle for, $/h, billed so far, expires in — and lets one go before
its own timer does. Everything goes through the engine's public API.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from engine.api import Engine, WarmNodeView

HEADER = ("POOL", "NODE", "STATE", "IDLE", "$/H", "BILLED", "EXPIRES IN")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    nodes = sub.add_parser("nodes", help="list the warm nodes kept for the next run; release them")
    nodes.add_argument("--json", action="store_true", help="one JSON object per line")
    nodes.add_argument("--pools", default=None, help="pools TOML file")
    verbs = nodes.add_subparsers(dest="verb")
    release = verbs.add_parser("release", help="destroy a warm node now (or every one)")
    release.add_argument("node", nargs="?", help="the node id `swjob nodes` shows")
    release.add_argument("--all", action="store_true", help="every parked warm node")


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from engine.api import Engine, EngineConfig, load_pools

    pools = load_pools(Path(args.pools) if args.pools else None)
    engine = Engine(EngineConfig(pools=pools))
    if args.verb == "release":
        return _release(engine, args)
    for line in render(engine.warm_nodes(), as_json=args.json):
        print(line)
    return 0


def _release(engine: Engine, args: argparse.Namespace) -> int:
    import asyncio

    if bool(args.node) == bool(args.all):
        print("error: name one NODE, or --all", file=sys.stderr)
        return 2
    before = {n.node_id for n in engine.warm_nodes() if n.in_use_by is None}
    problems = asyncio.run(engine.release_warm(None if args.all else args.node))
    for problem in problems:
        print(f"swjob nodes: {problem}", file=sys.stderr)
    gone = before - {n.node_id for n in engine.warm_nodes()}
    print(f"released {len(gone)} warm node(s)")
    return 1 if problems else 0


def say_kept(out: TextIO) -> None:
    """For `swjob gc`: the warm nodes, listed apart — kept on purpose, owned, bounded by
    their own timer: never orphans while it runs."""
    from engine.state.warmnodes import listing, view

    kept = [view(node) for node in listing()]
    if kept:
        print(f"{len(kept)} warm node(s) kept for the next run (not orphans):", file=out)
        for line in render(kept):
            print(f"  {line}", file=out)


def holding_runs(owned: set[str]) -> set[str]:
    """The runs whose nodes are kept warm (a Vast label names the run it was rented for),
    given the runs live engines drive (engine/state/warmnodes.py)."""
    from engine.state.warmnodes import holding_runs as held

    return held(owned)


def render(nodes: list[WarmNodeView], *, as_json: bool = False) -> list[str]:
    """The lines `swjob nodes` prints: a table (or JSON lines), or a note that none is kept."""
    if as_json:
        return [json.dumps(node.model_dump()) for node in nodes]
    if not nodes:
        return ["no warm nodes (a pool keeps them with keep_warm_s)"]
    from engine.api import money

    rows = [HEADER]
    for n in nodes:
        state = f"in use by {n.in_use_by}" if n.in_use_by else "warm"
        price = "—" if n.price_per_hour is None else f"{n.price_per_hour:.3f}"
        idle = "—" if n.in_use_by else _duration(n.idle_s)
        expires = "—" if n.in_use_by else _duration(n.expires_in_s)
        rows.append((n.pool, n.node_id, state, idle, price, money(n.billed), expires))
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]  # fmt: skip


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} m" if hours else f"{minutes} m {secs:02d} s"
