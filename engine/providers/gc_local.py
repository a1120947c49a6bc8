"""`swjob gc` on local pools: the nodes of abandoned runs on this machine.

A `swjob run` killed with -9 leaves its run unfinished in the index and its node (an
agent process) running. The node gives up after the pool's orphan_timeout_s: it stops
its job, removes its directory and exits. The run stays unfinished all the same, so its
slot of the pool's max_nodes stays taken (engine/providers/slots.py) and the next run on
the pool waits, told that "`swjob gc` collects its node" — but gc looked at Vast.ai
accounts only, and the slot stayed taken until someone ran `swjob attach`. So gc lists
an abandoned local run as it does an abandoned Vast one, and collecting it ends the run
FAILED: a node whose agent still runs is torn down as its owner would have (agent ended,
what is left of its job killed, directory removed), "abandoned: destroyed by gc"; a run
without a node directory has no node ("abandoned: its node is gone, found by gc"). A
directory left with no agent found working in it proves nothing (processes may not be
listable here, and its job may run on): it is listed and left to `swjob attach`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.jobs.pools import Pool, PoolSet
from engine.providers.base import NodeHandle
from engine.providers.local import LocalProvider, node_roots, running_node
from engine.providers.localspawn import node_root

if TYPE_CHECKING:  # gc.py's cli_gc calls this module's functions
    from engine.providers.gc import Collection, RunClaims


@dataclass(frozen=True)
class LocalOrphan:
    """An abandoned run of a local pool, and what gc found of its node."""

    pool: Pool
    run_id: str
    node: NodeHandle | None  # its agent, found working in its directory
    left_dir: str | None = None  # a directory of it without an agent found in it

    @property
    def collectable(self) -> bool:
        return self.left_dir is None

    @property
    def name(self) -> str:
        return (
            f"node {self.node.node_id} (run {self.run_id})" if self.node else f"run {self.run_id}"
        )

    def describe(self) -> str:
        where = f"(pool {self.pool.name})"
        if self.node is not None:
            return (
                f"node {self.node.node_id} (pool {self.pool.name}, run {self.run_id}, agent "
                f"pid {self.node.offer['pid']}) — its run is abandoned: "
                f"`swjob attach {self.run_id}` carries it on"
            )
        if self.left_dir is not None:
            return (
                f"run {self.run_id} {where}: its node directory {self.left_dir} is left "
                f"without an agent found in it — not collectable here: `swjob attach "
                f"{self.run_id}` settles it"
            )
        return (
            f"run {self.run_id} {where}: its node is gone — its run is abandoned: "
            "collecting ends it FAILED"
        )


async def find_local_orphans(pools: PoolSet, abandoned: dict[str, str]) -> list[LocalOrphan]:
    """The abandoned runs (`abandoned`: run id → pool) of the local pools in `pools`."""
    found = []
    for run_id, pool_name in sorted(abandoned.items()):
        if pool_name not in pools or (pool := pools.get(pool_name)).provider != "local":
            continue
        roots = node_roots(run_id)
        nodes = [node for root in roots if (node := await running_node(root)) is not None]
        if nodes:
            found.append(LocalOrphan(pool, run_id, nodes[0]))
        elif roots:
            found.append(LocalOrphan(pool, run_id, None, str(roots[0])))
        else:
            found.append(LocalOrphan(pool, run_id, None))
    return found


async def collect_local_orphans(
    orphans: Iterable[LocalOrphan], claims: RunClaims, done: Collection, stop_grace_s: float
) -> None:
    """End each run (its agent first, if it runs), under its lease: a run adopted since it
    was listed is left to its adopter. What was done is added to `done`."""
    try:
        for orphan in orphans:
            done.asked += 1
            if not claims.take(orphan.run_id):
                done.problems.append(
                    f"{orphan.name} left alone: it was adopted by another swjob process "
                    "since it was listed"
                )
                continue
            if orphan.node is not None:
                orphan = await _found_again(orphan)  # its pid may be another's by now
            if orphan.left_dir is not None:
                done.problems.append(orphan.describe())
                continue  # its lease given back below, unfinished: for `swjob attach`
            if orphan.node is not None:
                local = LocalProvider(orphan.pool.max_nodes, stop_grace_s=stop_grace_s,
                                      pool=orphan.pool.name)  # fmt: skip
                local.adopt(orphan.node)  # its slot file, which names the run, taken back
                await local.teardown(orphan.node)  # and named free once the node is gone
            done.destroyed += 1
            done.collected.append(orphan.name)
            if unrecorded := await claims.settle(orphan.run_id, found_gone=orphan.node is None):
                done.problems.append(unrecorded)
    finally:
        claims.release()


async def _found_again(orphan: LocalOrphan) -> LocalOrphan:
    """`orphan`, its node looked for again now that its run's lease is ours. Its agent was
    found when gc listed it, maybe long ago (the question waits for the user): it may
    have given up since (orphan_timeout_s) and its pid gone to another process of the
    user's, which the teardown would have ended as the agent. Only an agent working in
    the node's directory now is ended."""
    assert orphan.node is not None
    root = node_root(orphan.node.node_id)
    if (node := await running_node(root)) is not None:
        return LocalOrphan(orphan.pool, orphan.run_id, node)
    if root.exists():  # its agent gone, its directory left: as if found so when listed
        return LocalOrphan(orphan.pool, orphan.run_id, None, str(root))
    return LocalOrphan(orphan.pool, orphan.run_id, None)
