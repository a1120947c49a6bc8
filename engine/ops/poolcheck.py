"""`swjob pools`: each configured pool, and for a paid provider whether its API key works —
one cheap authenticated call (listing the account's instances), before a run finds out."""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import ProviderError
from engine.jobs.pools import Pool


@dataclass(frozen=True)
class PoolCheck:
    name: str
    provider: str
    summary: str  # `1× RTX_4090 ≥24 GB · ≤$0.60/h`
    ok: bool
    note: str  # what was checked, or why it failed (one line, the key masked)


async def check_pool(pool: Pool) -> PoolCheck:
    if pool.provider == "local":
        return PoolCheck(pool.name, pool.provider, pool.summary(), True, "nothing to check")
    if pool.provider == "runpod":
        return await _check_runpod(pool)
    from engine.providers.vastai import make_api

    try:
        listed = await make_api(pool).call("check the API key", "show_instances")
    except ProviderError as exc:
        return PoolCheck(pool.name, pool.provider, pool.summary(), False, str(exc))
    count = len(listed or [])
    where = f"${pool.api_key_env}" if pool.api_key_env else "the SDK's default key"
    note = f"API key works ({where}; {count} instance{'' if count == 1 else 's'} on the account)"
    return PoolCheck(pool.name, pool.provider, pool.summary(), True, note)


async def _check_runpod(pool: Pool) -> PoolCheck:
    """The same one call on RunPod: the account's pods, through the SDK."""
    from engine.providers.runpod_api import KEY_ENV
    from engine.providers.runpod_provider import RunPodProvider
    from engine.state.ledger import Ledger

    try:
        listed = await RunPodProvider(pool, Ledger()).pods()
    except ProviderError as exc:
        return PoolCheck(pool.name, pool.provider, pool.summary(), False, str(exc))
    count = len(listed)
    where = f"${pool.api_key_env or KEY_ENV}"
    note = f"API key works ({where}; {count} pod{'' if count == 1 else 's'} on the account)"
    return PoolCheck(pool.name, pool.provider, pool.summary(), True, note)
