"""Warm nodes this operator keeps: the record the next run claims one by.

A run on a pool with `keep_warm_s` leaves its healthy node parked (agent/warm.py) and
writes one file here, `<state dir>/warm/<node>.json` (0600, in the private state dir:
it holds the node's warm key, the only credential that can claim it). Any swjob
process of this operator can then claim it for a run of the same pool definition:
claiming is renaming the file to `<node>.inuse` — atomic, so of two processes racing
for one node exactly one gets it. A node in use is re-parked (a new file, a new key)
or destroyed when its run ends; the file goes when the node does.

Other operators never see these files (their own state dir), and the node obeys only
a proof of its warm key: two operators on one account never share a warm node. The
record says nothing the node does not enforce itself: its keep time runs on the node,
which releases itself when it passes (a record past it is stale, and dropped).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.report.views import WarmNodeView
from engine.state.paths import state_dir
from engine.state.planted import own_subdir
from engine.state.wholefile import replace_whole

PARKED, IN_USE = ".json", ".inuse"
STALE_AFTER_S = 60.0
"""A record this long past its node's keep time is dropped: the node released itself
(an expired Vast node's destroy may take a while; gc sees what is left of it)."""


def warm_dir() -> Path:
    return own_subdir(state_dir() / "warm")


def fits_key(pool: Any) -> str:
    """What a warm node must share with a run's pool to serve it: the pool's name and
    its node definition (provider, image, resources, selection, agent install; a local
    node's nice, which the console and `swjob run` choose apart) — not its caps, limits
    or timers, which are the run's."""
    fields = ("provider", "image", "resources", "selection", "agent_install", "interruptible")
    definition = {name: getattr(pool, name) for name in fields}
    if pool.provider == "local":
        definition["node_nice"] = pool.nodes_nice()
    text = json.dumps([pool.name, _plain(definition)], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return dump()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@dataclass
class WarmNode:
    """One kept node: enough to claim it (ticket, id, key), to release it (its provider
    handle) and to show it (pool, price, since when it idles, until when)."""

    node_id: str
    provider: str
    pool: str
    fits: str
    handle: dict[str, Any]
    agent_ticket: str
    agent_id: str
    warm_key: str
    keep_warm_s: float
    parked_at: float
    last_run: str
    price_per_hour: float | None = None
    in_use_by: str | None = None
    birth_run: str = ""
    """The run the node was provisioned for: its Vast label and ledger rows name it."""

    @property
    def expires_at(self) -> float:
        return self.parked_at + self.keep_warm_s

    def idle_s(self, now: float | None = None) -> float:
        return max(0.0, (now or time.time()) - self.parked_at)

    def billed_idle(self, now: float | None = None) -> float | None:
        """Dollars this node has billed idle since it was parked (None: no price)."""
        if self.price_per_hour is None:
            return None
        return self.price_per_hour * min(self.idle_s(now), self.keep_warm_s) / 3600


def _path(node_id: str, suffix: str) -> Path:
    safe = node_id.replace("/", "_")
    return warm_dir() / f"{safe}{suffix}"


def park(node: WarmNode) -> None:
    """Record `node` as warm (its previous in-use record, if any, goes)."""
    replace_whole(_path(node.node_id, PARKED), json.dumps(asdict(node)))
    _path(node.node_id, IN_USE).unlink(missing_ok=True)


def _read(path: Path) -> WarmNode | None:
    try:
        return WarmNode(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def listing() -> list[WarmNode]:
    """Every warm node (parked, or in use by a run), oldest first; stale ones dropped."""
    nodes = []
    now = time.time()
    for path in warm_dir().iterdir():
        if path.suffix not in (PARKED, IN_USE) or (node := _read(path)) is None:
            continue
        if path.suffix == PARKED and now > node.expires_at + STALE_AFTER_S:
            path.unlink(missing_ok=True)
            continue
        nodes.append(node)
    return sorted(nodes, key=lambda n: n.parked_at)


def claim(fits: str, run_id: str) -> WarmNode | None:
    """Take the most recently parked node that fits and has time left, for `run_id`:
    None when there is none (or another process took each first)."""
    now = time.time()
    ready = [n for n in listing() if n.in_use_by is None and n.fits == fits]
    for node in sorted(ready, key=lambda n: n.parked_at, reverse=True):
        if now >= node.expires_at - CLAIM_MARGIN_S:
            continue  # about to release itself: renting anew is surer
        if (taken := take(node.node_id, run_id)) is not None:
            return taken
    return None


CLAIM_MARGIN_S = 2.0


def take(node_id: str, by: str) -> WarmNode | None:
    """Move `node_id`'s parked record to in use by `by`; None if it is not parked."""
    parked, in_use = _path(node_id, PARKED), _path(node_id, IN_USE)
    try:
        os.rename(parked, in_use)  # the race's one winner
    except OSError:
        return None
    node = _read(in_use)
    if node is None:
        in_use.unlink(missing_ok=True)
        return None
    node.in_use_by = by
    replace_whole(in_use, json.dumps(asdict(node)))
    return node


def drop(node_id: str) -> None:
    """The node is gone (destroyed, released, expired, lost): forget it."""
    for suffix in (PARKED, IN_USE):
        with contextlib.suppress(OSError):
            _path(node_id, suffix).unlink()


def parked_in(pool: str) -> int:
    """How many of `pool`'s nodes are parked now: they count against its max_nodes."""
    now = time.time()
    return sum(
        1 for n in listing() if n.pool == pool and n.in_use_by is None and now < n.expires_at
    )


def holding_runs(owned: set[str]) -> set[str]:
    """The runs whose nodes are kept here, by the run a Vast label and the ledger name (the
    node's birth run): every parked node's, and a claimed node's while the run that took it
    is `owned` (driven by a live engine). gc never calls those nodes orphans; a claimed
    node whose run nobody drives any more is one, like any node of such a run."""
    return {
        n.birth_run or n.last_run for n in listing() if n.in_use_by is None or n.in_use_by in owned
    }


def view(node: WarmNode, now: float | None = None) -> WarmNodeView:
    """What `swjob nodes` and the console show of `node`: never its key or address."""
    now = now or time.time()
    return WarmNodeView(
        node_id=node.node_id,
        pool=node.pool,
        provider=node.provider,
        idle_s=0.0 if node.in_use_by else node.idle_s(now),
        price_per_hour=node.price_per_hour,
        billed=node.billed_idle(now),
        expires_in_s=0.0 if node.in_use_by else max(0.0, node.expires_at - now),
        in_use_by=node.in_use_by,
    )
