"""Which pool serves a job whose pool names `fallback` pools (docs/pools.md): decided at
submit, by asking each pool's provider for an offer in turn."""

from __future__ import annotations

from engine.core.config import SubmitError
from engine.core.providers import Providers
from engine.errors import ProviderError, one_line
from engine.jobs.pools import Pool
from engine.providers.base import ProvisionError


async def fall_over(providers: Providers, first: Pool) -> tuple[Pool, list[str]]:
    """The first of `first` and its `fallback` pools with an offer under its limits
    (the provider's own search: one call each), and why each one before it had none.
    A pool that cannot be searched (local) serves as it is; none with an offer: one
    line naming each pool's reason."""
    passed: list[str] = []
    for name in (first.name, *first.fallback):
        pool = providers.config.pools.get(name)
        await providers.ready(pool)
        search = getattr(providers.get(pool), "search", None)
        if search is None:
            return pool, passed
        try:
            await search()
        except (ProvisionError, ProviderError) as exc:
            passed.append(f"pool {name!r} has no offer ({one_line(exc)})")
            continue
        return pool, passed
    raise SubmitError("; ".join(passed))
