"""Nodes billing without a live run (a crash, a lost teardown): found from Vast.ai labels
and ledger rows, warned of at start, destroyed on request (`swjob gc`, the board's
collect action)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.core.providers import Providers
from engine.core.runs import RunTable
from engine.errors import one_line
from engine.report import events as ev
from engine.run import abandon
from engine.state import ownership, warmnodes
from engine.state.ledger import Ledger
from engine.state.store import Store

if TYPE_CHECKING:
    from engine.providers.gc import Collection, Orphan


class Orphans:
    """What `table`'s engine knows of orphans; warnings go to `alert` (with the orphan)."""

    def __init__(
        self,
        table: RunTable,
        providers: Providers,
        alert: Callable[..., None],
        store: Store,
    ) -> None:
        self.table = table
        self.providers = providers
        self.alert = alert
        self.config = table.config
        self._store: Store | None = store

    async def find(self) -> list[Orphan]:
        """Nodes billing without a live run (Vast.ai labels and ledger rows), for `swjob gc`
        and the board's collect action. Runs not yet finished are never orphans: they
        belong to a live engine or await recovery, and nor are instances whose destroy
        was asked for lately (Vast lists them until it settles). Raises VastApiError when
        an account cannot be listed."""
        if not self.providers.rents_nodes():
            return []
        await self.providers.all_ready()
        from engine.providers.gc import find_orphans

        owned, abandoned = self._ownership()
        found = await find_orphans(self.config.pools, Ledger(), owned, abandoned=abandoned)
        return [o for o in found if not o.settling]  # being destroyed: not billing unowned

    def _ownership(self) -> tuple[set[str], set[str]]:
        """(runs some live engine drives, unfinished runs nobody drives). The first are
        never orphans; the nodes of the second are (engine/state/ownership.py)."""
        assert self._store is not None
        rows = self._store.unfinished()
        owned = {v.run_id for v in self.table.running()} | ownership.owned(self._store.path, rows)
        owned |= warmnodes.holding_runs(owned)  # kept warm: owned, billing, on their timer
        unfinished = {v.run_id for v, _ in rows}
        return owned, unfinished - owned

    async def collect(self, orphans: list[Orphan]) -> Collection:
        """Destroy (verified) the given orphans: how many went, and what went wrong."""
        await self.providers.all_ready()
        from engine.providers.gc import destroy_orphans

        claims = abandon.Claims(self._store) if self._store is not None else None
        done = await destroy_orphans(orphans, self.config.pools, Ledger(), claims=claims)
        for orphan in orphans:
            if orphan.name in done.collected:
                self._node_collected(orphan)
        return done

    def _node_collected(self, orphan: Orphan) -> None:
        """gc destroyed `orphan`: a run this engine drove, whose teardown left that node
        unconfirmed, is told it is gone (its "may still be billing" alert is settled), and
        its provider frees the node's slot of the pool."""
        driver = self.table.drivers.get(orphan.run_id or "")
        node = driver.view.node if driver is not None else None
        if driver is None or node is None or node.node_id != orphan.instance_id:
            return
        if node.state == ev.NodeState.UNCONFIRMED:
            self.providers.get(driver.pool).forget(node.node_id)  # its max_nodes slot
            gone = ev.Node(
                run_id=node.run_id, provider=node.provider, node_id=node.node_id,
                state=ev.NodeState.GONE,
            )  # fmt: skip
            driver.publish(gone)

    async def check(self) -> None:
        """At start, warn about nodes that bill without a live run (a crash, a lost teardown)."""
        if not self.providers.rents_nodes():
            return
        try:
            found = await self.find()
        except Exception as exc:  # whatever broke, the operator hears of it: never silence
            self.alert(f"could not check for orphaned nodes: {one_line(exc)}")
            return
        for orphan in found:  # one gc leaves alone says why (describe), not "run swjob gc"
            described, ours = orphan.describe(), orphan.collectable
            action = " — run `swjob gc`" if ours or orphan.unattributed else ""  # it asks
            self.alert(f"orphaned node: {described}{action}", orphan=described, collectable=ours)
