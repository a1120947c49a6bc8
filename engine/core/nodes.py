"""The pools as the board shows them (each with the nodes of the runs driven here) and
the nodes this operator keeps warm (docs/warm-nodes.md)."""

from __future__ import annotations

import time

from engine.core.config import SubmitError
from engine.core.providers import Providers
from engine.core.runs import RunTable
from engine.errors import one_line
from engine.jobs.pools import PoolFileError
from engine.report.views import PoolView, WarmNodeView
from engine.run import warm
from engine.state import warmnodes

WARM_READ_S = 1.0


class Nodes:
    """The nodes of `table`'s runs, pool by pool, and the warm ones of every swjob here."""

    def __init__(self, table: RunTable, providers: Providers) -> None:
        self.table = table
        self.providers = providers
        self.config = table.config
        self._warm_read: tuple[float, list[WarmNodeView]] = (-WARM_READ_S, [])

    def warm_nodes(self) -> list[WarmNodeView]:
        """The nodes this operator keeps warm (parked, or taken by a run), with their bill."""
        now = time.time()
        return [warmnodes.view(node, now) for node in warmnodes.listing()]

    async def release_warm(self, node_id: str | None = None) -> list[str]:
        """Destroy the parked warm node `node_id` (None: every one); the problems, one line
        each (an unknown node is one)."""
        nodes = [n for n in warmnodes.listing() if n.in_use_by is None]
        chosen = [n for n in nodes if node_id is None or n.node_id == node_id]
        if node_id is not None and not chosen:
            return [f"no parked warm node {node_id} (see `swjob nodes`)"]
        problems = []
        for node in chosen:
            try:
                pool = self.config.pools.get(node.pool)
                await self.providers.ready(pool)
                problem = await warm.release(self.providers.get(pool), node)
            except (PoolFileError, SubmitError) as exc:
                problem = f"warm node {node.node_id}: {one_line(exc)}"
            if problem is not None:
                problems.append(problem)
        return problems

    def pools(self) -> list[PoolView]:
        """Each pool with the nodes of the runs driven here and the nodes kept warm."""
        views = []
        kept = self._warm_listing()
        for pool in self.config.pools:
            nodes = [
                d.view.node
                for d in self.table.drivers.values()
                if d.pool.name == pool.name
                and d.view.node
                and d.view.node.state not in ("gone", "warm")  # warm: listed with `warm`
            ]
            views.append(
                PoolView(
                    name=pool.name,
                    provider=pool.provider,
                    max_nodes=pool.max_nodes,
                    summary=pool.summary(),
                    nodes=nodes,
                    max_dollars=pool.caps.max_dollars,
                    max_hours=pool.caps.max_hours,
                    warm=[w for w in kept if w.pool == pool.name and w.in_use_by is None],
                )
            )
        return views

    def _warm_listing(self) -> list[WarmNodeView]:
        """The warm nodes, read at most once a second: the console asks for pools ten
        times a second, and the records are files (any swjob process may park one)."""
        now = time.monotonic()
        if now - self._warm_read[0] >= WARM_READ_S:
            try:
                self._warm_read = (now, self.warm_nodes())
            except OSError:
                self._warm_read = (now, [])
        return self._warm_read[1]
