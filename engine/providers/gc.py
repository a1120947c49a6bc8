"""Orphaned nodes: find what is billing without a live run, and destroy it (`swjob gc`).

Two sources, because either can be the only trace of a leak: the Vast.ai and RunPod
accounts of the configured pools (every instance whose label, every pod whose name,
marks it as swjob's — a pod's listing is read as an instance's, `_pod_row`) and the
ledger's open rows (written before each create, so even a crash in the middle of one
leaves a row). A node is an orphan when no live engine drives its run
(engine/state/ownership.py): a run that never finished but whose owner died is
*abandoned* — listed with the hint to carry it on (`swjob attach RUN`), and when
collected its run is marked FAILED by the caller. Open ledger rows whose instance no
longer exists are stale: collecting them closes the row, and when the row's run is
abandoned and its node existed, ends that run FAILED too — its node is confirmed gone,
whoever destroyed it (the run's dead owner, or an earlier gc whose destroy Vast took a
while to settle). On an account shared with other operators, an instance whose label
names another operator and that our ledger does not know is listed read-only: never
destroyed by us. Vast's destroy is
eventually consistent: an instance whose destroy swjob asked for (its ledger row says
when) stays listed a while — for `CONFIRM_FOR_S` it is said to be being destroyed and
left to Vast, not an orphan to destroy again; still listed past that, it is one. A
destroy gc asks for itself is held to the same rule: an instance Vast still lists after
it is being destroyed, not collected — its rows stay open (marked destroy asked) and its
run unfinished until a later gc sees it gone. The abandoned runs of local pools, whose
nodes are processes of this machine, are found and ended by engine/providers/gc_local.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TextIO

from agent.budget import billing_start, reported_start
from engine.errors import ProviderError
from engine.jobs.pools import RENTED, Pool, PoolFileError, PoolSet
from engine.providers.base import TeardownError
from engine.providers.gc_local import collect_local_orphans, find_local_orphans
from engine.providers.vast_api import RetryPolicy
from engine.providers.vast_boot import operator_of, run_id_of
from engine.providers.vastai import CONFIRM_FOR_S, CREATE_SETTLE_S, VastProvider, make_api
from engine.state import warmnodes
from engine.state.identity import operator_id
from engine.state.ledger import Ledger, LedgerEntry
from engine.state.locked import StateNotWritten

GONE = "gone"
UNVERIFIABLE = "unverifiable"  # a ledger row whose pool left the pools file


@dataclass(frozen=True)
class Orphan:
    pool: str
    run_id: str | None
    instance_id: str | None
    status: str  # the instance's actual_status, or GONE when only a stale ledger row is left
    billing_s: float
    price_per_hour: float | None = None
    entries: tuple[int, ...] = ()  # ledger rows that close when it is gone
    abandoned: bool = False  # its run never finished and no live engine drives it
    foreign: str | None = None  # another operator's id: listed, never destroyed by us
    unattributed: bool = False  # its label names no operator and no ledger row is ours:
    # an older swjob's, or another operator's on a shared account — asked about apart
    destroy_asked_s: float | None = None  # how long ago swjob asked Vast to destroy it

    @property
    def settling(self) -> bool:
        """Its destroy was asked for lately: Vast has yet to stop listing it."""
        return self.destroy_asked_s is not None and self.destroy_asked_s < CONFIRM_FOR_S

    @property
    def collectable(self) -> bool:
        """Ours to destroy here: not another operator's, not already being destroyed, its
        pool still configured (the account to destroy it with)."""
        return self.why_left is None

    @property
    def ends_run(self) -> bool:
        """Collecting it ends its run FAILED: the run is abandoned and had this node."""
        return self.abandoned and self.run_id is not None and self.instance_id is not None

    @property
    def name(self) -> str:
        """What it is, in a few words: its instance (and run), or its ledger row."""
        if self.status == GONE or self.instance_id is None:
            return f"ledger row of run {self.run_id}"
        return f"instance {self.instance_id} (run {self.run_id})"

    @property
    def why_left(self) -> str | None:
        """Why collecting leaves it alone, or None when it is ours to collect."""
        if self.foreign:
            return f"operator {self.foreign}'s, not ours"
        if self.unattributed:
            return "no operator id in its label: maybe another operator's (asked apart)"
        if self.settling:
            return "being destroyed: Vast lists it until the destroy settles"
        if self.status == UNVERIFIABLE:
            return f"its pool {self.pool} is gone from the pools file"
        return None

    def describe(self) -> str:
        hours = self.billing_s / 3600
        cost = f", ≈ ${hours * self.price_per_hour:.2f}" if self.price_per_hour else ""
        price = f" at ${self.price_per_hour:.3f}/h" if self.price_per_hour else ""
        if self.status == UNVERIFIABLE:
            return f"{self.name}: not collectable here — {self.why_left}"
        if self.status == GONE:
            line = f"ledger row of run {self.run_id} (pool {self.pool}): no instance exists"
            if self.ends_run:
                return f"{line} — its run is abandoned: collecting ends it FAILED"
            return line
        if self.settling:
            return (
                f"instance {self.instance_id} (pool {self.pool}, run {self.run_id}, "
                f"{self.status}): being destroyed — asked {_ago(self.destroy_asked_s)} ago, "
                "Vast lists it until the destroy settles"
            )
        line = (
            f"instance {self.instance_id} (pool {self.pool}, run {self.run_id}, "
            f"{self.status}): billing for {hours:.2f} h{price}{cost}"
        )
        if self.foreign:
            return f"{line} — operator {self.foreign}'s, not ours: left alone"
        if self.unattributed:
            return f"{line} — {self.why_left}"
        if self.abandoned:
            return f"{line} — its run is abandoned: `swjob attach {self.run_id}` carries it on"
        if self.destroy_asked_s is not None:
            return f"{line} — its destroy, asked {_ago(self.destroy_asked_s)} ago, did not take"
        return line


def _ago(seconds: float | None) -> str:
    seconds = seconds or 0.0
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


@dataclass
class Collection:
    """What destroying orphans came to: how many of them no longer bill, and one line per
    problem — an orphan left alone or not destroyed, or one destroyed whose records
    (ledger row, run index) could not all be closed."""

    asked: int
    destroyed: int = 0
    problems: list[str] = field(default_factory=list)
    collected: list[str] = field(default_factory=list)  # the name of each one destroyed
    left: list[str] = field(default_factory=list)  # each one not ours to destroy, and why
    settling: list[str] = field(default_factory=list)  # destroy accepted, still listed

    def summary(self) -> str:
        line = f"collected {self.destroyed} of {self.asked}"
        if self.settling:
            line += (
                f", {len(self.settling)} being destroyed ({', '.join(self.settling)}: Vast "
                "still lists it; a later `swjob gc` confirms it gone)"
            )
        return line

    def report(self) -> str:
        """What was destroyed, what was left alone and why, and what went wrong: a line
        each (the console's toast after collecting)."""
        lines = [self.summary() + (f": {', '.join(self.collected)}" if self.collected else "")]
        if self.left:
            lines.append(f"left {len(self.left)}: " + "; ".join(self.left))
        lines.extend(self.problems)
        if not self.left and not self.problems and not self.settling:
            lines.append("nothing left billing")
        return "\n".join(lines)


class RunClaims(Protocol):
    """Holds abandoned runs while their nodes are destroyed (engine/run/abandon.py)."""

    def take(self, run_id: str) -> bool: ...
    async def settle(self, run_id: str, found_gone: bool = False) -> str | None: ...
    async def node_gone(self, run_id: str, instance: str) -> str | None: ...
    def release(self) -> None: ...


def _accounts(pools: Iterable[Pool]) -> list[Pool]:
    """One pool per distinct API key source: each account is listed once."""
    seen: dict[tuple[str, str | None], Pool] = {}
    for pool in pools:
        if pool.provider in RENTED:
            seen.setdefault((pool.provider, pool.api_key_env), pool)
    return list(seen.values())


async def _labelled(pool: Pool, server_url: str | None, retry: RetryPolicy | None) -> list[Any]:
    if pool.provider == "runpod":
        rows = [_pod_row(p) for p in await _runpod(pool, retry).pods()]
    else:
        api = make_api(pool, server_url=server_url, retry=retry)
        rows = await api.call("show instances", "show_instances")
    return [r for r in rows or [] if run_id_of(r.get("label"))]


def _runpod(pool: Pool, retry: RetryPolicy | None, ledger: Ledger | None = None) -> Any:
    from engine.providers.runpod_provider import RunPodProvider  # the SDK only when needed

    return RunPodProvider(pool, ledger or Ledger(), retry=retry)


def _pod_row(pod: dict[str, Any]) -> dict[str, Any]:
    """A RunPod pod as the Vast instance row the rest of gc reads: its name is its label
    (`swjob:<operator>:<run>`), its desiredStatus its status, costPerHr its $/h. RunPod
    lists no birth: the ledger's creation time stands in (`_from_row`)."""
    return {
        "id": pod["id"],
        "label": pod.get("name"),
        "actual_status": str(pod.get("desiredStatus") or "").lower() or None,
        "dph_total": pod.get("costPerHr"),
        "start_date": None,
    }


def _from_row(
    pool: Pool,
    row: dict[str, Any],
    entries: list[LedgerEntry],
    now: float,
    abandoned: set[str],
    claim: frozenset[str] = frozenset(),
) -> Orphan:
    instance_id = str(row["id"])
    label = row.get("label")
    rows = [e for e in entries if e.instance_id == instance_id or e.label == label]
    mine = [e.entry for e in rows]
    operator = operator_of(label)
    ours = (None, operator_id(), *claim)  # `--claim`: an id this operator had before
    foreign = operator if operator not in ours and not mine else None
    # Vast's start_date is null until the instance starts (created, loading): till then
    # it bills, as both meters count (agent/budget.billing_start), from our ledger's start
    created = [e.created_at for e in rows if e.created_at is not None]
    born = billing_start(reported_start(row), min(created, default=now))
    asked = [e.destroy_requested_at for e in rows if e.destroy_requested_at is not None]
    return Orphan(
        pool=pool.name,
        run_id=run_id_of(label),
        instance_id=instance_id,
        status=row.get("actual_status") or "unknown",
        billing_s=max(0.0, now - float(born)),
        price_per_hour=row.get("dph_total"),
        entries=tuple(mine),
        abandoned=run_id_of(label) in abandoned,
        foreign=foreign,
        unattributed=operator is None and not mine,
        destroy_asked_s=now - max(asked) if asked else None,
    )


def _unlisted(entry: LedgerEntry, pools: PoolSet, now: float, abandoned: set[str]) -> Orphan:
    """A ledger row whose instance no account listing shows: gone, if its pool's account
    was listed; unverifiable if that pool is no longer configured."""
    listed = entry.pool in pools and pools.get(entry.pool or "").provider == entry.provider
    return Orphan(
        pool=entry.pool or "?",
        run_id=entry.run_id,
        instance_id=entry.instance_id,
        status=GONE if listed else UNVERIFIABLE,
        billing_s=0.0 if entry.created_at is None else now - entry.created_at,
        entries=(entry.entry,),
        abandoned=entry.run_id in abandoned,
    )


async def find_orphans(
    pools: PoolSet,
    ledger: Ledger,
    live_run_ids: set[str],
    *,
    abandoned: set[str] | None = None,
    server_url: str | None = None,
    retry: RetryPolicy | None = None,
    claim: frozenset[str] = frozenset(),
) -> list[Orphan]:
    """Labelled instances and open ledger rows that no live run owns; `abandoned` names
    unfinished runs without a live owner (their nodes are orphans, with a hint).

    Raises ProviderError (one sanitized line) when an account cannot be listed: then
    nothing can be said about its ledger rows either."""
    now = time.time()
    entries = [
        e for e in await asyncio.to_thread(ledger.open_entries) if e.run_id not in live_run_ids
    ]
    orphans: list[Orphan] = []
    seen: set[str] = set()
    for pool in _accounts(pools):
        for row in await _labelled(pool, server_url, retry):
            if run_id_of(row.get("label")) in live_run_ids or str(row["id"]) in seen:
                continue
            seen.add(str(row["id"]))
            orphans.append(_from_row(pool, row, entries, now, abandoned or set(), claim))
    claimed = {e for o in orphans for e in o.entries}
    unlisted = [
        e
        for e in entries
        if e.entry not in claimed
        and e.provider in RENTED
        and not _maybe_creating(e, abandoned or set(), now, retry or RetryPolicy())
    ]
    found = [_unlisted(e, pools, now, abandoned or set()) for e in unlisted]
    return orphans + await _settled_destroys(found, unlisted, ledger)


async def _settled_destroys(
    found: list[Orphan], rows: list[LedgerEntry], ledger: Ledger
) -> list[Orphan]:
    """`found` (from `rows`) without the destroys that settled: swjob asked Vast to
    destroy the instance, Vast took a while to stop listing it, and the process confirming
    it ended first. No longer listed, it is gone: its row closes here, with nothing to say
    (the next `swjob run` warned of an orphan, gc offered to destroy what was gone). An
    abandoned run's row stays, for gc to end the run."""
    left = []
    for orphan, row in zip(found, rows, strict=True):
        settled = orphan.status == GONE and row.destroy_requested_at is not None
        if settled and not orphan.abandoned:
            try:
                await asyncio.to_thread(ledger.record_destroyed, row.entry)
                continue
            except StateNotWritten:  # listed, as before: a later look closes it
                pass
        left.append(orphan)
    return left


def _maybe_creating(
    entry: LedgerEntry, abandoned: set[str], now: float, retry: RetryPolicy
) -> bool:
    """An abandoned run's intent without an instance, younger than a create request's
    timeout: its engine may have died with the create in flight, and Vast may still
    answer it. Closing the row as gone now would leave that instance to no one (the
    adopter finds a run's node through its open row): it is left for a later look."""
    young = now - entry.intent_at < retry.timeout_s + CREATE_SETTLE_S
    return entry.instance_id is None and entry.run_id in abandoned and young


async def destroy_orphans(
    orphans: list[Orphan],
    pools: PoolSet,
    ledger: Ledger,
    *,
    server_url: str | None = None,
    retry: RetryPolicy | None = None,
    claims: RunClaims | None = None,
) -> Collection:
    """Destroy (verified) every orphan instance of ours and close its ledger rows; another
    operator's, and one being destroyed already, are left (`Collection.left` says why).
    An abandoned run is claimed first and settled once its node is gone; one adopted
    since it was listed is left alone, and said so."""
    try:
        done = await _destroy(orphans, pools, ledger, server_url, retry, claims)
    finally:
        if claims is not None:
            claims.release()
    for orphan in orphans:  # a warm node a dead run had claimed: its record goes with it
        if orphan.name in done.collected and orphan.instance_id is not None:
            with contextlib.suppress(OSError):
                warmnodes.drop(orphan.instance_id)
    return done


async def _destroy(
    orphans: list[Orphan],
    pools: PoolSet,
    ledger: Ledger,
    server_url: str | None,
    retry: RetryPolicy | None,
    claims: RunClaims | None,
) -> Collection:
    ours = [orphan for orphan in orphans if orphan.collectable]
    done = Collection(asked=len(ours))
    done.left = [f"{o.name} — {o.why_left}" for o in orphans if not o.collectable]
    errors = done.problems
    for orphan in ours:
        claimed = orphan.ends_run and claims is not None
        if claimed and not claims.take(orphan.run_id):
            errors.append(
                f"{orphan.name} left alone: run {orphan.run_id} was adopted "
                "by another swjob process since it was listed"
            )
            continue
        found_gone = True  # its node was gone before this gc asked anything
        if orphan.status != GONE and orphan.instance_id is not None:
            try:
                pool = pools.get(orphan.pool)
                provider = (
                    _runpod(pool, retry, ledger)
                    if pool.provider == "runpod"
                    else VastProvider(pool, ledger, server_url=server_url, retry=retry)
                )
                gone = await provider.destroy(orphan.instance_id)
            except (TeardownError, ProviderError, PoolFileError) as exc:
                errors.append(str(exc))
                continue
            if not gone:  # accepted, still listed: rows and run wait until it is seen gone
                done.settling.append(orphan.name)
                await _destroy_asked(orphan, ledger, errors)
                continue
            found_gone = False
        done.destroyed += 1
        done.collected.append(orphan.name)
        try:
            for entry in orphan.entries:
                await asyncio.to_thread(ledger.record_destroyed, entry)
        except StateNotWritten as exc:  # its node is gone: the next gc closes the rows
            errors.append(f"{orphan.describe()}: destroyed, but its ledger row is open: {exc}")
        if claims is not None and orphan.run_id and orphan.instance_id:
            recording = (
                claims.settle(orphan.run_id, found_gone)
                if claimed  # an abandoned run ends; an ended one is told its node is gone
                else claims.node_gone(orphan.run_id, orphan.instance_id)
            )
            if unrecorded := await recording:
                errors.append(unrecorded)
    return done


async def _destroy_asked(orphan: Orphan, ledger: Ledger, errors: list[str]) -> None:
    """Mark its rows destroy-asked: the next gc says it is being destroyed, not billing."""
    try:
        for entry in orphan.entries:
            await asyncio.to_thread(ledger.record_destroy_requested, entry)
    except StateNotWritten as exc:
        errors.append(f"{orphan.name}: its destroy asked, but not in its ledger row: {exc}")


def cli_gc(
    pools: PoolSet,
    yes: bool,
    out: TextIO,
    *,
    live_run_ids: set[str] | None = None,
    abandoned: set[str] | None = None,
    abandoned_pools: dict[str, str] | None = None,
    claims: RunClaims | None = None,
    ask: Callable[[str], str] = input,
    ledger: Ledger | None = None,
    retry: RetryPolicy | None = None,
    stop_grace_s: float = 10.0,
    claim: frozenset[str] = frozenset(),
) -> int:
    """`swjob gc`: list orphans with how long each has been billing, destroy ours on yes.
    `abandoned_pools` (run → pool) are the abandoned runs whose local nodes are looked
    for too (engine/providers/gc_local.py; collected only with `claims`). `claim`: other
    operator ids whose instances are ours too (a state dir lost, and its id with it).
    Instances no operator id attributes are destroyed only on a question of their own."""

    ledger = ledger or Ledger()
    live = live_run_ids or set()
    failed = 0  # a Vast.ai account not listed: said, and the exit code says it
    try:
        found = find_orphans(pools, ledger, live, abandoned=abandoned, retry=retry, claim=claim)
        orphans = asyncio.run(found)
    except ProviderError as exc:  # this machine's nodes are looked for all the same: a
        # pools file naming a Vast.ai pool whose key is not set left a local run's slot
        # taken for good, its waiting run told that `swjob gc` collects its node
        print(f"swjob gc: {exc}", file=out)
        orphans, failed = [], 1
    local = asyncio.run(find_local_orphans(pools, abandoned_pools or {}))
    if not orphans and not local:
        print("no orphaned nodes" + (" on this machine" if failed else ""), file=out)
        return failed
    for orphan in [*orphans, *local]:
        print(f"  {orphan.describe()}", file=out)
    if any(o.foreign for o in orphans):
        hint = "`swjob gc --claim ID` also collects an id's that was yours (a lost state dir)"
        print(f"this operator is {operator_id()}; {hint}", file=out)
    ours = [o for o in orphans if o.collectable]
    ours_local = [o for o in local if o.collectable] if claims is not None else []
    ours += _unattributed_asked(orphans, yes, ask, out)
    if not ours and not ours_local:  # each line above says why it is left
        print("nothing to destroy", file=out)
        return failed
    question = f"destroy {len(ours) + len(ours_local)} orphan(s)? [y/N] "
    if not yes and not _confirmed(ask, question, out):
        print("nothing destroyed", file=out)
        return failed

    async def collect() -> Collection:
        done = await destroy_orphans(ours, pools, ledger, retry=retry, claims=claims)
        if claims is not None:
            await collect_local_orphans(ours_local, claims, done, stop_grace_s)
        return done

    done = asyncio.run(collect())
    for problem in done.problems:
        print(f"swjob gc: {problem}", file=out)
    print(done.summary(), file=out)
    return 1 if done.problems else failed


def _unattributed_asked(
    orphans: list[Orphan], yes: bool, ask: Callable[[str], str], out: TextIO
) -> list[Orphan]:
    """The instances without an operator id to collect: only on a yes to a question of
    their own (never by --yes: on a shared account they may be someone else's)."""
    unknown = [o for o in orphans if o.unattributed and replace(o, unattributed=False).collectable]
    if not unknown:
        return []
    if yes:
        said = f"left {len(unknown)} instance(s) without an operator id"
        print(f"{said}: `swjob gc` without --yes asks about them", file=out)
        return []
    question = (
        f"{len(unknown)} instance(s) carry no operator id (an older swjob's, or another "
        "operator's on this account): count them in? [y/N] "
    )
    if not _confirmed(ask, question, out):
        return []
    return [replace(o, unattributed=False) for o in unknown]


def _confirmed(ask: Callable[[str], str], question: str, out: TextIO) -> bool:
    """A yes to `question`. No answer — end of input (`swjob gc < /dev/null`, a closed
    pipe) or Ctrl-C at the prompt — is a no, said on its own line, not a traceback."""
    try:
        return ask(question).strip().lower() in {"y", "yes"}
    except (EOFError, KeyboardInterrupt):
        print("\nno answer (--yes destroys without asking)", file=out)
        return False
