"""Operator side of the transfer service: push the workspace, pull the outputs.

The engine supplies an `XferLink` whose `open_bi()` returns a stream on the node's
current transfer connection, waiting for the agent to redial after a drop. Every
stream is opened through it, so a dropped connection costs one retry: the receiver
reports what it already verified and only the rest is sent again. Retries are
bounded (with backoff); a `TransferError` out of here means the run fails with
"transfer failed: <message>".

A file that cannot move is not the transfer's end: the others still go. It is
recorded with its reason (the pull's manifest, the push's left-out list). A file that
changed while it was read, or failed verification, gets one more pass of its own
first; only then is it recorded ("changed during transfer"), never landed as verified.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from iroh.iroh_ffi import IrohError

from agent.transfer import Progress, TransferError, wire
from agent.transfer.compress import decompress
from agent.transfer.memory import relaxing_gc
from agent.transfer.progress import ProgressMeter
from agent.transfer.receiver import LANDERS_AFTER, Receiver
from agent.transfer.safety import check_link_target, check_relpath
from agent.transfer.schedule import STREAMS, Item, is_large, schedule
from agent.transfer.sender import Packet, send_items
from agent.transfer.server import pages
from agent.transfer.walk import Entry, walk_tree
from agent.transfer.wire import FrameReader, StreamEnded
from engine.run.manifest import (
    LandingFailed,
    ManifestEntry,
    ManifestNotWritten,
    PullResult,
    landing,
    manifest_entries,
    worth_another_pass,
    write_manifest,
)
from engine.run.reconcile import reconcile

__all__ = [
    "LandingFailed",
    "ManifestEntry",
    "ManifestNotWritten",
    "PullResult",
    "PushResult",
    "TransferError",
    "XferLink",
    "pull_outputs",
    "push_workspace",
]

ATTEMPTS = 5
BACKOFF_S = 0.5
_REFUSAL_WAIT_S = 2.0
_TRANSIENT = (IrohError, StreamEnded, ConnectionError, EOFError)
OnProgress = Callable[[Progress], None]
T = TypeVar("T")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class SendStream(Protocol):
    async def write_all(self, buf: bytes) -> None: ...
    async def finish(self) -> None: ...


class RecvStream(Protocol):
    async def read(self, size_limit: int) -> bytes: ...
    async def read_exact(self, size: int) -> bytes: ...


class BiStream(Protocol):
    def send(self) -> SendStream: ...
    def recv(self) -> RecvStream: ...


class XferLink(Protocol):
    async def open_bi(self) -> BiStream: ...


@dataclass(frozen=True)
class PushResult:
    files: int
    bytes: int
    attempts: int = 1
    resumed_files: int = 0  # already verified on the node when the last attempt started
    resumed_bytes: int = 0
    refused: list[str] = field(default_factory=list)  # left out: escaping links, special files
    seconds: float = 0.0
    reused_files: int = 0  # held unchanged by a warm node: linked there, not sent
    reused_bytes: int = 0


def _failed_rows(meta: dict[str, Any]) -> dict[str, str]:
    rows = meta.get("failed", [])
    if not isinstance(rows, list):
        raise wire.WireError("bad failed list in a push answer")
    out = {}
    for row in rows:
        if not (isinstance(row, list) and len(row) == 2 and all(isinstance(x, str) for x in row)):
            raise wire.WireError(f"bad failed entry {row!r} in a push answer")
        out[row[0]] = row[1]
    return out


def _final_error(exc: BaseException) -> BaseException | None:
    """The exception that ends the transfer, or None if `exc` is only a dropped connection."""
    if isinstance(exc, BaseExceptionGroup):
        found = [_final_error(e) for e in exc.exceptions]
        errors = [e for e in found if e is not None]
        return next(
            (e for e in errors if isinstance(e, TransferError)), errors[0] if errors else None
        )
    return None if isinstance(exc, _TRANSIENT) else exc


async def _with_retries(op: Callable[[int], Awaitable[T]], what: str) -> tuple[T, int]:
    last: BaseException | None = None
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await op(attempt), attempt
        except Exception as exc:
            final = _final_error(exc)
            if final is not None:
                raise final from None
            last = exc
        if attempt < ATTEMPTS:
            await asyncio.sleep(BACKOFF_S * 2 ** (attempt - 1))
    raise TransferError(f"{what}: connection to the node lost {ATTEMPTS} times ({last})")


async def _open(link: XferLink) -> BiStream:
    """A stream on the node's transfer connection. A connection that died under us (the
    node is redialing it) is a dropped connection like one mid-transfer: the attempt is
    retried and waits for the new one. Only no connection within the deadline is final."""
    try:
        return await link.open_bi()
    except (TransferError, *_TRANSIENT):
        raise
    except Exception as exc:
        raise TransferError(f"no transfer connection to the node: {exc}") from None


async def _answer(reader: FrameReader) -> dict[str, Any]:
    """The node's next record; its `err` record becomes a TransferError."""
    meta = await reader.next_meta()
    if meta is None:
        raise StreamEnded("the node closed the stream without an answer")
    if meta["t"] == "err":
        raise TransferError(str(meta.get("msg", "the node refused the transfer")))
    return meta


async def _simple_request(link: XferLink, body: bytes) -> FrameReader:
    bi = await _open(link)
    await bi.send().write_all(body)
    await bi.send().finish()
    return FrameReader(bi.recv())


# ---- push -----------------------------------------------------------------------------


class _Tally:
    """Feeds the meter from sent packets and remembers each small file's hash (for resume)."""

    def __init__(self, meter: ProgressMeter, chunks: dict[str, int], known: dict[str, str]):
        self._meter, self._chunks, self._known = meter, dict(chunks), known

    def on_packet(self, packet: Packet) -> None:
        self._known.update(packet.hashes)
        files = packet.files
        if packet.chunk_of is not None:
            self._chunks[packet.chunk_of] -= 1
            files += self._chunks[packet.chunk_of] == 0
        self._meter.add(packet.nbytes, files, packet.current)


async def _remote_state(link: XferLink, session: str) -> tuple[dict[str, Any], dict[str, set]]:
    """What the node already verified in this push session: files (with hashes) and chunks."""
    reader = await _simple_request(
        link, wire.record({"t": "req", "op": "status", "session": session})
    )
    files: dict[str, Any] = {}
    chunks: dict[str, set[int]] = {}
    while (meta := await _answer(reader))["t"] != "end":
        if meta["t"] == "files":
            files.update((p, h) for p, h in meta["f"])
        elif meta["t"] == "chunks":
            chunks.update((p, set(done)) for p, done in meta["c"])
    return files, chunks


async def _push_stream(
    link: XferLink,
    session: str,
    root: Path,
    items: list[Item],
    on_packet: Callable,
    failed: dict[str, str],
) -> None:
    bi = await _open(link)
    send = bi.send()
    answer = asyncio.create_task(_answer(FrameReader(bi.recv())))
    try:
        try:
            await send.write_all(wire.record({"t": "req", "op": "push", "session": session}))
            await send_items(root, items, send.write_all, on_packet)
            await send.write_all(wire.record({"t": "end"}))
            await send.finish()
        except _TRANSIENT:
            # A node that refused stops reading, which fails our writes: its answer says why.
            await asyncio.wait({answer}, timeout=_REFUSAL_WAIT_S)
            if answer.done() and isinstance(answer.exception(), TransferError):
                raise answer.exception() from None
            raise
        reply = await answer
        if reply["t"] != "ok":
            raise wire.WireError(f"unexpected answer {reply['t']!r} to a push")
        failed.update(_failed_rows(reply))
    finally:
        answer.cancel()


def _quick_key(entry: Entry) -> list[Any]:
    """A file as the node's held copy must match it to be reused: path, size, mtime, mode."""
    return [entry.path, entry.size, entry.mtime_ns, entry.mode & 0o777]


async def _reuse_held(link: XferLink, session: str, files: list[Entry]) -> set[str]:
    """On a warm node, link the files it still holds unchanged from the previous run into
    the workdir (agent/transfer/held.py); the paths it linked, which the push skips."""
    reader = await _simple_request(link, wire.record({"t": "req", "op": "held"}))
    held: dict[str, list[Any]] = {}
    while (meta := await _answer(reader))["t"] != "end":
        if meta["t"] == "held" and isinstance(meta.get("h"), list):
            held.update((row[0], row) for row in meta["h"] if isinstance(row, list) and row)
    rows = [_quick_key(e) for e in files if held.get(e.path) == _quick_key(e)]
    if not rows:
        return set()
    ask = wire.record({"t": "req", "op": "adopt", "session": session})
    reader = await _simple_request(
        link, ask + pages("adopt", "a", rows) + wire.record({"t": "end"})
    )
    adopted: set[str] = set()
    while (meta := await _answer(reader))["t"] != "end":
        if meta["t"] == "adopted" and isinstance(meta.get("a"), list):
            adopted.update(p for p in meta["a"] if isinstance(p, str))
    return adopted


@relaxing_gc
async def push_workspace(
    link: XferLink,
    root: Path,
    exclude: list[str],
    on_progress: OnProgress,
    *,
    delta: bool = False,
) -> PushResult:
    """Push `root` (minus `exclude`, gitignore rules) into the node's workdir, verified;
    `delta` (a warm node): files it still holds unchanged are linked there, not sent."""
    started = time.monotonic()
    walk = await asyncio.to_thread(walk_tree, root, exclude)
    files = [e for e in walk.entries if e.kind == "file"]
    meter = ProgressMeter(on_progress, sum(e.size for e in files), len(files))
    session, known = secrets.token_hex(8), {}
    failed: dict[str, str] = {}  # what the node did not land in the last pass, and why
    passes = [0]
    reused: set[str] = set()
    if delta:
        reused, _ = await _with_retries(lambda _n: _reuse_held(link, session, files), "push")

    async def attempt(number: int) -> Any:
        resume = number > 1 or passes[0] > 0
        done, chunks = await _remote_state(link, session) if resume else ({}, {})
        failed.clear()  # the status request let the node forget them too
        verified = {p for p, h in done.items() if known.get(p, h) == h}
        plan = schedule(walk.entries, verified | reused, chunks)
        meter.restart(plan.bytes_skipped, plan.files_skipped)
        tally = _Tally(meter, plan.chunks, known)
        async with asyncio.TaskGroup() as group:
            for items in plan.streams:
                if items:
                    push = _push_stream(link, session, root, items, tally.on_packet, failed)
                    group.create_task(push)
        return plan

    plan, attempts = await _with_retries(attempt, "push")
    if any(worth_another_pass(why) for why in failed.values()):
        passes[0] += 1
        plan, more = await _with_retries(attempt, "push")
        attempts += more
    meter.finish()
    reused_bytes = sum(e.size for e in files if e.path in reused)
    left_out = [f"left out {p!r}: {why}" for p, why in sorted(failed.items())]
    return PushResult(
        files=len(files),
        bytes=meter.bytes_total,
        attempts=attempts,
        resumed_files=plan.files_skipped - len(reused),
        resumed_bytes=plan.bytes_skipped - reused_bytes,
        refused=walk.refused + left_out,
        seconds=time.monotonic() - started,
        reused_files=len(reused),
        reused_bytes=reused_bytes,
    )


# ---- pull -----------------------------------------------------------------------------


@dataclass
class _Listing:
    entries: list[Entry]
    missing: list[str]
    refused: list[str]
    sha256: dict[str, str]  # large files' whole SHA-256, when asked for


def _entry(row: Any) -> Entry:
    """One listed output, checked as if the node were hostile."""
    try:
        entry = Entry(*row)
    except TypeError:
        raise wire.WireError(f"bad output entry {row!r}") from None
    check_relpath(entry.path)
    if entry.kind not in ("file", "dir", "link") or not isinstance(entry.size, int):
        raise wire.WireError(f"bad output entry {row!r}")
    if entry.kind == "link":
        check_link_target(entry.path, entry.target)
    return entry


async def _list(
    link: XferLink,
    patterns: list[str],
    digests: bool = False,
    on_page: Callable[[list[Entry]], None] | None = None,
) -> _Listing:
    """The node's listing of the declared outputs; with `digests`, each large file's
    whole SHA-256 too (the final pull checks every file it lands against it). `on_page`
    gets each page of entries as it arrives."""
    ask = {"t": "req", "op": "list", "patterns": patterns, "packed": True}
    request = wire.record(ask | ({"digests": True} if digests else {}))
    reader = await _simple_request(link, request)
    entries: list[Entry] = []
    while (meta := await _answer(reader))["t"] in ("entries", "zentries"):
        rows = meta.get("e") if meta["t"] == "entries" else await _packed_rows(reader)
        if not isinstance(rows, list):
            raise wire.WireError("bad page in an output listing")
        page = [_entry(row) for row in rows]
        entries.extend(page)
        if on_page is not None:
            on_page(page)
    if meta["t"] != "end":
        raise wire.WireError(f"unexpected record {meta['t']!r} in an output listing")
    sha256 = meta.get("sha256", {})
    if not isinstance(sha256, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and _SHA256.fullmatch(v)
        for k, v in sha256.items()
    ):
        raise wire.WireError("bad digests in an output listing")
    missing, refused = list(meta.get("missing", [])), list(meta.get("refused", []))
    return _Listing(entries, missing, refused, sha256)


async def _packed_rows(reader: FrameReader) -> Any:
    """A `zentries` page's rows: the data frame after it, zstd JSON (bounded: a hostile
    node's frame may not expand past MAX_FRAME)."""
    frame = await reader.next_frame()
    if frame is None or frame[0] != wire.DATA:
        raise wire.WireError("a packed listing page without its data")
    try:
        return json.loads(decompress(frame[1], wire.MAX_FRAME))
    except ValueError:
        raise wire.WireError("bad packed page in an output listing") from None


async def _pull_stream(
    link: XferLink, items: list[Item], receiver: Receiver, meter: ProgressMeter
) -> None:
    request = wire.record({"t": "req", "op": "pull"}) + pages("items", "i", items)
    reader = await _simple_request(link, request + wire.record({"t": "end"}))
    await receiver.receive(reader, meter.add)


async def _land_while_listing(
    link: XferLink,
    patterns: list[str],
    receiver: Receiver,
    meter: ProgressMeter,
    listings: list[_Listing],
) -> set[str]:
    """The first pull into an empty landing dir: small outputs are pulled page by page
    while the node's listing still arrives (its walk of 100,000 outputs takes ~1 s, which
    the pull otherwise waited out before its first byte), by STREAMS workers; large files
    join them once the listing's end brings their digests. `listings[-1]` holds what is
    listed so far (a pull cut short names it), then the whole listing. Returns the paths
    pulled here, each landed or failed by then."""
    runs: asyncio.Queue[list[Item] | None] = asyncio.Queue()
    listed = listings[-1]
    pulled: set[str] = set()

    def deal(entries: list[Entry]) -> None:
        for items in schedule(entries).streams:
            if items:
                runs.put_nowait(items)

    def on_page(entries: list[Entry]) -> None:
        for entry in entries:
            if entry.path in pulled:  # two workers would land it at once
                raise wire.WireError(f"output {entry.path!r} listed twice")
            pulled.add(entry.path)
        listed.entries.extend(entries)
        files = [e for e in entries if e.kind == "file"]  # the large ones too: a total
        meter.bytes_total += sum(e.size for e in files)  # that only grows as pages come
        meter.files_total += len(files)
        deal([e for e in entries if not is_large(e)])

    async def worker() -> None:
        while (items := await runs.get()) is not None:
            await _pull_stream(link, items, receiver, meter)

    async with asyncio.TaskGroup() as group:
        workers = [group.create_task(worker()) for _ in range(STREAMS)]
        try:
            listing = await _list(link, patterns, digests=True, on_page=on_page)
            listings[-1] = listing
            receiver.expected_sha256 = listing.sha256
            deal([e for e in listing.entries if is_large(e)])
        finally:
            for _ in workers:
                runs.put_nowait(None)
    return pulled


def _landed_size(receiver: Receiver, path: str) -> int | None:
    landed = receiver.verified.get(path)
    return None if landed is None else landed.size


@dataclass
class Stopped:
    """Why a pull may be cancelled (set by whoever cancels it, before), and what it had
    collected by then (set by the pull)."""

    why: str | None = None
    result: PullResult | None = None


@relaxing_gc
async def pull_outputs(
    link: XferLink,
    patterns: list[str],
    run_dir: Path,
    on_progress: OnProgress,
    redact: Callable[[str], str] = str,
    stopped: Stopped | None = None,
) -> PullResult:
    """Pull the declared outputs into `run_dir/outputs/`, verified, and write manifest.json.

    `redact` masks secrets in the refusal messages, the reasons and in manifest.json's
    paths (they quote names the job chose). LandingFailed when the operator's own disk
    refuses the landing directory (an output it refuses is one not landed);
    ManifestNotWritten, carrying what landed, when it refuses the manifest. Cancelled
    while `stopped.why` says why, the manifest names every output that did not land with
    that reason, and `stopped.result` holds what did."""
    outputs = run_dir / "outputs"
    receiver = Receiver(
        outputs, hash_chunked=True, per_file=True, staged=True, landers_after=LANDERS_AFTER
    )
    with landing(outputs):
        outputs.mkdir(parents=True, exist_ok=True)
        synced = any(outputs.iterdir())  # a live sync landed some: reconcile them first
    meters: list[ProgressMeter] = []
    listings: list[_Listing] = []
    pruned: list[str] = []  # landed by a live sync, since deleted or replaced by the job

    def result(listing: _Listing, attempts: int) -> PullResult:
        files = manifest_entries(listing.entries, receiver, redact)
        total = sum(e.size for e in files if e.verified)
        refused = [redact(line) for line in [*listing.refused, *receiver.refused]]
        return PullResult(files, listing.missing, total, refused, attempts, pruned)

    async def attempt(number: int) -> _Listing:
        early: set[str] = set()  # pulled while the listing arrived
        if not listings and not synced:
            meters.append(ProgressMeter(on_progress, 0, 0))
            # cut short, the outputs listed so far and, as before any listing, the patterns
            listings.append(_Listing([], list(patterns), [], {}))
            early = await _land_while_listing(link, patterns, receiver, meters[0], listings)
            listing = listings[-1]
        else:
            listing = await _list(link, patterns, digests=True)
            listings.append(listing)
            if len(listings) == 1:  # before anything lands (a retry keeps what it holds)
                pruned.extend(await asyncio.to_thread(reconcile, outputs, listing.entries))
            receiver.expected_sha256 = listing.sha256  # (early: as soon as it arrived)
        files = [e for e in listing.entries if e.kind == "file"]
        if not meters:
            meters.append(ProgressMeter(on_progress, 0, 0))
        meters[0].bytes_total, meters[0].files_total = sum(e.size for e in files), len(files)
        have = early | {
            e.path
            for e in files
            if _landed_size(receiver, e.path) == e.size or e.path in receiver.failed
        }
        plan = schedule(listing.entries, have, receiver.chunks_held())
        meters[0].restart(plan.bytes_skipped, plan.files_skipped)
        async with asyncio.TaskGroup() as group:
            for items in plan.streams:
                if items:
                    group.create_task(_pull_stream(link, items, receiver, meters[0]))
        return listing

    try:
        listing, attempts = await _with_retries(attempt, "pull")
        # a copy: a lander's thread of a cancelled attempt may still be recording its batch
        again = [p for p, why in list(receiver.failed.items()) if worth_another_pass(why)]
        if again:
            receiver.forget_failed(again)
            listing, more = await _with_retries(attempt, "pull")
            attempts += more
    except BaseException:
        # failed or stopped: say which outputs landed whole; drop the partial ones' pieces
        receiver.close(discard_partials=True)
        why = stopped.why if stopped is not None else None
        partial = result(listings[-1], len(listings)) if listings else None
        if why is not None:  # cut short: even before the listing, every output is named
            partial = (partial or PullResult([], list(patterns), 0)).cut_short(why)
            stopped.result = partial
        if partial is not None:  # a transfer's own error is the one to say; no manifest
            with contextlib.suppress(LandingFailed):  # is no claim
                write_manifest(run_dir, partial, redact, complete=False, cut_short=why)
        raise
    receiver.close()
    meters[0].finish()
    pulled = result(listing, attempts)
    try:
        write_manifest(run_dir, pulled, redact)
    except LandingFailed as exc:  # what landed whole stays collected: said so, not lost
        raise ManifestNotWritten(str(exc), pulled) from None
    return pulled
