"""Which provider serves a pool: one place that maps `pool.provider` to an implementation."""

from __future__ import annotations

from collections.abc import Callable

from engine.jobs.pools import Pool
from engine.providers.base import Provider
from engine.providers.local import LocalProvider


def make_provider(
    pool: Pool,
    *,
    stop_grace_s: float,
    on_alert: Callable[[str], None],
) -> Provider:
    """`on_alert` receives the provider's one-line reports (retries, skipped offers)."""
    if pool.provider == "local":
        return LocalProvider(
            pool.max_nodes,
            stop_grace_s=stop_grace_s,
            pool=pool.name,
            on_alert=on_alert,
            node_nice=pool.nodes_nice(),
        )
    if pool.provider == "vastai":
        from engine.providers.vastai import VastProvider
        from engine.state.ledger import (
            Ledger,  # the SDK is heavy: import it only when a pool needs it
        )

        return VastProvider(pool, Ledger(), on_alert=on_alert)
    if pool.provider == "runpod":
        from engine.providers.runpod_provider import RunPodProvider
        from engine.state.ledger import Ledger

        return RunPodProvider(pool, Ledger(), on_alert=on_alert)
    raise ValueError(f"pool {pool.name!r}: unknown provider {pool.provider!r}")
