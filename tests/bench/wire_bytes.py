"""Bytes on the wire and zstd CPU for a tree, offline: the slow-link levers of issue 38.

The tree's entries are put in an order, dealt over the streams by the schedule and cut
into the packets the sender builds (batches of small files up to 4 MiB, 4 MiB chunks of
large ones), then compressed three ways at each level:
- `frames`: each packet one zstd frame, exactly as a push does (`maybe_compress_parts`,
  its compressibility probe included), with the bytes and CPU per kind of packet (a
  batch's kind is the extension holding most of its bytes);
- `streamed`: every packet of a stream into one zstd stream, flushed at each packet, with
  a window of 2^W bytes (long-distance matching above 4 MiB) — what a per-stream context
  would send;
- `dict`: each packet a frame, with a dictionary trained on a sample of the tree's files
  up to 64 KiB (its bytes counted once, its training CPU printed).
Orders: `walk` (the schedule's: depth first, sorted), `ext-name` (by extension, then file
name, then path: solid archivers' order), `ext-path` (by extension, then path), `stem`
(each `__pycache__/m.*.pyc` right after its `m.py`). CPU is this process's, one thread.

    python tests/bench/wire_bytes.py [--tree DIR (default: this Python's site-packages,
        the transfer bench's tree c)] [--orders walk,ext-name,ext-path,stem]
        [--levels 3,6,9] [--streamed 22,24] [--dict-kib 110]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import site
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.transfer.compress import known_incompressible, maybe_compress_parts
from agent.transfer.safety import Parents
from agent.transfer.schedule import BATCH_TARGET, CHUNK, schedule
from agent.transfer.sender import Packet, _small_record
from agent.transfer.walk import Entry, walk_tree

Payload = tuple[str | None, str, bytes]  # (a chunk's path, kind, bytes)


def ext(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return name[dot:].lower() if dot > 0 else ""


def _by_kind(with_name: bool) -> Callable[[list[Entry]], list[Entry]]:
    def key(e: Entry) -> tuple:
        if e.kind != "file":
            return (0, "", "", e.path)
        return (1, ext(e.path), e.path.rsplit("/", 1)[-1] if with_name else "", e.path)

    return lambda entries: sorted(entries, key=key)


def _stem_key(e: Entry) -> tuple:
    folder, _, name = e.path.rpartition("/")
    if folder.endswith("__pycache__") and name.endswith(".pyc"):
        return (folder.removesuffix("__pycache__").rstrip("/"), name.split(".", 1)[0], 1, name)
    return (folder, name.rsplit(".", 1)[0], 0, name)


def _stem(entries: list[Entry]) -> list[Entry]:
    files = sorted((e for e in entries if e.kind == "file"), key=_stem_key)
    return [e for e in entries if e.kind != "file"] + files


ORDERS: dict[str, Callable[[list[Entry]], list[Entry]]] = {
    "walk": lambda entries: entries,
    "ext-name": _by_kind(True),
    "ext-path": _by_kind(False),
    "stem": _stem,
}


def payloads(root: Path, items: list[list]) -> Iterator[Payload]:
    """One stream's packets, cut as `sender.build_packet` cuts them (uncompressed)."""
    i = 0
    while i < len(items):
        if items[i][0] == "chunk":
            path, index = items[i][1], int(items[i][2])
            with open(root / path, "rb") as f:
                f.seek(index * CHUNK)
                yield path, ext(path), f.read(CHUNK)
            i += 1
            continue
        packet, parts, kinds, parents = Packet([]), [], collections.Counter(), Parents(root)
        while i < len(items) and items[i][0] != "chunk" and packet.nbytes < BATCH_TARGET:
            before = packet.nbytes
            parts += _small_record(root, items[i], packet, parents)
            kinds[ext(items[i][1]) if items[i][0] == "file" else "/"] += packet.nbytes - before
            i += 1
        parents.close()
        yield None, kinds.most_common(1)[0][0], b"".join(parts)


def _kind(kind: str) -> str:
    return kind if kind in (".py", ".pyc", ".so") else "other"


def frames(streams: list[list[Payload]], level: int) -> str:
    per: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0, 0.0])
    for hint, kind, data in (p for s in streams for p in s):
        started = time.process_time()
        parts, _ = maybe_compress_parts([data], hint, level)
        row = per[_kind(kind)]
        row[0] += len(data)
        row[1] += sum(map(len, parts))
        row[2] += time.process_time() - started
    total = sum(r[1] for r in per.values()), sum(r[2] for r in per.values())
    kinds = " ".join(
        f"{k} {r[0] / 1e6:.0f}→{r[1] / 1e6:.1f} MB {r[2]:.1f} s" for k, r in sorted(per.items())
    )
    return f"{total[0] / 1e6:7.1f} MB {total[1]:5.1f} s  ({kinds})"


def _sized(streams: list[list[Payload]], pack: Callable[[bytes], int]) -> tuple[int, float]:
    size, cpu = 0, 0.0
    for hint, _, data in (p for s in streams for p in s):
        if hint is not None and known_incompressible(hint):
            size += len(data)
            continue
        started = time.process_time()
        size += min(pack(data), len(data))
        cpu += time.process_time() - started
    return size, cpu


def streamed(streams: list[list[Payload]], level: int, window_log: int) -> str:
    size, cpu = 0, 0.0
    for stream in streams:
        params = zstandard.ZstdCompressionParameters.from_level(
            level, window_log=window_log, enable_ldm=window_log > 22
        )
        obj = zstandard.ZstdCompressor(compression_params=params).compressobj()

        def pack(data: bytes, obj=obj) -> int:
            return len(obj.compress(data)) + len(obj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK))

        got = _sized([stream], pack)
        size, cpu = size + got[0], cpu + got[1]
    return f"{size / 1e6:7.1f} MB {cpu:5.1f} s"


def trained(
    root: Path, entries: list[Entry], dict_size: int
) -> tuple[zstandard.ZstdCompressionDict, str]:
    small = [e for e in entries if e.kind == "file" and e.size <= 64 * 1024]
    random.Random(1).shuffle(small)
    samples, got = [], 0
    for e in small:
        if got > 100 * dict_size:
            break
        samples.append((root / e.path).read_bytes())
        got += len(samples[-1])
    started = time.process_time()
    trained = zstandard.train_dictionary(dict_size, samples, level=6)
    return trained, f"trained in {time.process_time() - started:.1f} s on {got / 1e6:.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(site.getsitepackages()[0]))
    parser.add_argument("--orders", default="walk,ext-name,ext-path,stem")
    parser.add_argument("--levels", default="3,6,9")
    parser.add_argument("--streamed", default="", help="window logs, e.g. 22,24")
    parser.add_argument("--dict-kib", type=int, default=0)
    args = parser.parse_args()
    entries = walk_tree(args.tree, []).entries
    levels = [int(x) for x in args.levels.split(",")]
    windows = [int(x) for x in args.streamed.split(",") if x]
    for order in args.orders.split(","):
        plan = schedule(ORDERS[order](entries))
        streams = [list(payloads(args.tree, items)) for items in plan.streams]
        raw = sum(len(p[2]) for s in streams for p in s)
        print(f"{order}: {sum(map(len, streams))} packets, {raw / 1e6:.1f} MB framed", end="")
        print(f" (load {os.getloadavg()[0]:.1f})", flush=True)
        for level in levels:
            print(f"  frames   level {level:2}: {frames(streams, level)}", flush=True)
            for window_log in windows:
                got = streamed(streams, level, window_log)
                print(f"  streamed level {level:2}, window 2^{window_log}: {got}", flush=True)
        if args.dict_kib:
            dictionary, how = trained(args.tree, entries, args.dict_kib * 1024)
            print(f"  dictionary of {args.dict_kib} KiB, {how}", flush=True)
            for level in levels:
                pack = zstandard.ZstdCompressor(level=level, dict_data=dictionary).compress
                size, cpu = _sized(streams, lambda data, pack=pack: len(pack(data)))
                size += len(dictionary.as_bytes())
                print(f"  dict     level {level:2}: {size / 1e6:7.1f} MB {cpu:5.1f} s", flush=True)


if __name__ == "__main__":
    main()
