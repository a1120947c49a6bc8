"""The sink's upload against its floor: the agent's Uploader (what a node runs at
collection: listing, SHA-256 of every file, MD5 check of each small one's ETag, a big
one's parts put as objects each checked by its ETag, the manifest) beside the same bytes
put by the bare obstore client as multipart uploads with the same concurrency (4 files
× 8 parts for big files, 32 small files at once), in
the same run, into a real S3 server on loopback (SeaweedFS's `weed`, as the tests use).

Two trees: 1 GiB as 4 × 256 MiB, and 20,000 small files (4 KiB). Each is put twice by
each side, taking turns at going first, under fresh prefixes; the best of each is reported with the
ratio (goal: ≤ 1.2× the floor for big files, ≤ 1.5× for small ones). On loopback the
store's own CPU shares the machine with both, so the figures bound the overhead only.

    python -m tests.bench.sink [--big-mib 256] [--big 4] [--small 20000] [--reps 2] [--tiny]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import obstore

from agent.protocol import SinkTarget
from agent.sink import upload as up
from agent.sink.store import open_store
from tests.support.s3 import s3_server_in

MiB = 1 << 20
SMALL_SIZE = 4096


def make_trees(root: Path, big: int, big_mib: int, small: int) -> tuple[Path, Path]:
    big_dir, small_dir = root / "big", root / "small"
    big_dir.mkdir()
    small_dir.mkdir()
    for n in range(big):
        with (big_dir / f"ckpt_{n}.pt").open("wb") as out:
            for _ in range(big_mib):
                out.write(os.urandom(MiB))
    for n in range(small):
        folder = small_dir / f"d{n // 1000}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{n}.json").write_bytes(os.urandom(SMALL_SIZE))
    return big_dir, small_dir


async def agent_put(target: SinkTarget, root: Path) -> float:
    started = time.perf_counter()
    report = await up.Uploader(target, root).upload(final=True)
    assert report.manifest.complete, report.manifest.not_landed
    return time.perf_counter() - started


async def bare_put(target: SinkTarget, root: Path) -> float:
    """The floor: each file read and put by the client alone, at the Uploader's concurrency."""
    store = open_store(target)
    files = [p for p in root.rglob("*") if p.is_file()]
    small, big = asyncio.Semaphore(up.SMALL_AT_ONCE), asyncio.Semaphore(up.BIG_AT_ONCE)
    started = time.perf_counter()

    async def one(path: Path) -> None:
        key = f"outputs/{path.relative_to(root).as_posix()}"
        if path.stat().st_size <= up.SMALL:
            async with small:
                await obstore.put_async(store, key, path.read_bytes(), use_multipart=False)
            return
        async with big:
            with path.open("rb") as reader:
                await obstore.put_async(
                    store, key, reader, chunk_size=up.PART, max_concurrency=up.PARTS_AT_ONCE
                )

    await asyncio.gather(*(one(p) for p in files))
    return time.perf_counter() - started


async def warm_up(server: object, bucket: str) -> None:
    """The store's first writes grow its volumes (seconds): done before anything is timed."""
    target = SinkTarget(
        bucket=bucket,
        prefix="bench/warm",
        endpoint=server.endpoint,  # type: ignore[attr-defined]
        access_key_id=server.access_key,  # type: ignore[attr-defined]
        secret_access_key=server.secret_key,  # type: ignore[attr-defined]
    )
    store = open_store(target)
    await asyncio.gather(*(obstore.put_async(store, f"w{n}", b"x" * 4096) for n in range(64)))
    await obstore.put_async(store, "big", os.urandom(3 * up.PART), chunk_size=up.PART)


async def compare(server: object, bucket: str, name: str, root: Path, reps: int) -> str:
    best = {"floor": float("inf"), "agent": float("inf")}
    sides = [("floor", bare_put), ("agent", agent_put)]
    for rep in range(reps):  # each goes first in turn: the store slows as it fills
        for side, put in sides if rep % 2 == 0 else sides[::-1]:
            target = SinkTarget(
                bucket=bucket,
                prefix=f"bench/{name}/{side}{rep}",
                endpoint=server.endpoint,  # type: ignore[attr-defined]
                access_key_id=server.access_key,  # type: ignore[attr-defined]
                secret_access_key=server.secret_key,  # type: ignore[attr-defined]
                patterns=["*"] if side == "agent" else [],
            )
            best[side] = min(best[side], await put(target, root))
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    files = sum(1 for p in root.rglob("*") if p.is_file())
    ratio = best["agent"] / best["floor"]
    return (
        f"{name:6} {files:6d} files {size / MiB:8.1f} MiB  floor {best['floor']:7.2f} s "
        f"({size / MiB / best['floor']:7.1f} MiB/s)  agent {best['agent']:7.2f} s  "
        f"ratio {ratio:.2f}×"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-mib", type=int, default=256)
    parser.add_argument("--big", type=int, default=4)
    parser.add_argument("--small", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--tiny", action="store_true", help="a smoke run: seconds, no figures")
    args = parser.parse_args()
    if args.tiny:
        args.big_mib, args.big, args.small, args.reps = 9, 1, 20, 1
    with tempfile.TemporaryDirectory(prefix="swjob-bench-sink-") as tmp:
        root = Path(tmp)
        (root / "s3").mkdir()
        big_dir, small_dir = make_trees(root, args.big, args.big_mib, args.small)
        with s3_server_in(root / "s3") as server:
            bucket = server.bucket()
            await warm_up(server, bucket)
            for name, tree in (("big", big_dir), ("small", small_dir)):
                if any(tree.rglob("*")):
                    print(await compare(server, bucket, name, tree, args.reps), flush=True)
    print(f"reproduce: python -m tests.bench.sink --big-mib {args.big_mib} --big {args.big} "
          f"--small {args.small} --reps {args.reps}")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
