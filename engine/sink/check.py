"""The sink checked at submit, before any node is rented: credentials set, endpoint up,
bucket there, keys accepted — one line naming the pool when not (a node would otherwise
bill through its whole run to find its outputs had nowhere to go)."""

from __future__ import annotations

import asyncio

from agent.sink.store import describe, open_store
from agent.sinkhand import ASK, FIELDS
from engine.jobs.jobspec import JobSpec
from engine.jobs.pools import Pool
from engine.sink.place import SinkError, place_for

CHECK_S = 30.0


def check_job_env(job: JobSpec, pool: Pool) -> None:
    """A job's env may ask for the sink's credentials by name (`@sink:<field>`): only on a
    pool with a sink, and only for a field there is. The message names the variable, never
    a value (env values are secrets)."""
    for name, value in job.env.items():
        if not value.startswith(ASK):
            continue
        field = value[len(ASK) :]
        if pool.sink is None:
            raise SinkError(
                f"job {job.name!r}: env {name} asks for the sink's {field}, "
                f"but pool {pool.name!r} has no sink"
            )
        if field not in FIELDS:
            raise SinkError(
                f"job {job.name!r}: env {name}: no sink field {field!r} "
                f"(one of {', '.join(FIELDS)})"
            )


async def check_sink(pool: Pool, job: str) -> None:
    """Raise SinkError when `pool`'s sink cannot be listed with the operator's credentials."""
    place = place_for(pool, job, "check")
    if place is None:
        return
    import obstore  # only a pool with a sink pays for loading it

    target = place.target()
    store = open_store(target, prefix=place.prefix.rsplit("/", 1)[0], retries=1)
    try:
        async with asyncio.timeout(CHECK_S):
            stream = obstore.list(store, chunk_size=1)
            await anext(aiter(stream), None)
    except TimeoutError:
        why = f"no answer in {CHECK_S:g} s"
        raise SinkError(f"pool {pool.name!r}: sink {pool.sink}: {why}") from None
    except Exception as exc:
        why = describe(exc, target.bucket)
        raise SinkError(f"pool {pool.name!r}: sink {pool.sink}: {why}") from None
