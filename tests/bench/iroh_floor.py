"""The iroh binding's ceiling: bytes over bare QUIC streams, with no files, hashing or framing.

swjob's transfer cannot be faster than the binding it runs on. This moves `--mib` MiB of
random bytes from one process to another over `--streams` parallel iroh streams, in the
write and read sizes the binding handles best (256 KiB), and reports the wall time and
the CPU of each side. `tests/bench/transfer.py` runs it beside tree (a) so the ceiling is
measured in the same session as swjob, rsync and tar.

With `--land DIR` the receiver also writes what it reads into one file per stream under
DIR (each piece `os.pwrite`n at its offset by a thread, as swjob's writers do): the floor of
a push that lands its bytes, which a file transfer cannot go below either. Writing into
the page cache is not free: 0.2-0.4 s of kernel CPU a GiB here when the pages were just
freed, 1.6-2.5 s when the VM's host had reclaimed them (a bare write loop, twice in a row).

    python tests/bench/iroh_floor.py [--mib 1024] [--streams 4] [--land DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
MiB = 1 << 20
PIECE = 256 * 1024


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _receive(ticket: str, total: int, streams: int, land: Path | None) -> None:
    from agent import endpoint
    from agent.protocol import XFER_ALPN

    ep = await endpoint.bind(accept=False)
    conn = await ep.connect(endpoint.addr_from_ticket(ticket), XFER_ALPN)
    started = _cpu_s()

    async def drain(index: int) -> object:
        bi = await conn.accept_bi()
        reader, got = bi.recv(), 0
        fd = os.open(land / f"s{index}.bin", os.O_WRONLY | os.O_CREAT, 0o600) if land else -1
        writing: asyncio.Future[int] | None = None
        while got < total // streams:
            piece = await reader.read_exact(PIECE)
            if fd >= 0:  # one write in flight per stream while the next piece is read
                if writing is not None:
                    await writing
                writing = asyncio.ensure_future(asyncio.to_thread(os.pwrite, fd, piece, got))
            got += len(piece)
        if writing is not None:
            await writing
        if fd >= 0:
            os.close(fd)
        return bi

    if land:
        land.mkdir(parents=True, exist_ok=True)
    bis = await asyncio.gather(*(drain(i) for i in range(streams)))
    cpu = _cpu_s() - started
    await bis[0].send().write_all(b"k")
    await bis[0].send().finish()
    print(json.dumps({"cpu_s": cpu}), flush=True)
    # close only once the sender has read the "k" and finished its side: closing after a
    # fixed pause lost the byte now and then on a loaded machine (the sender exited 1)
    await bis[0].recv().read_to_end(1)
    await ep.close()


async def _send(total: int, streams: int, land: Path | None) -> dict[str, float]:
    from agent import endpoint

    ep = await endpoint.bind(accept=True)
    cmd = [sys.executable, str(HERE), "--receive", endpoint.ticket_of(ep)]
    cmd += ["--mib", str(total // MiB), "--streams", str(streams)]
    cmd += ["--land", str(land)] if land else []
    receiver = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        conn = await (await (await ep.accept_next()).accept()).connect()
        bis = [await conn.open_bi() for _ in range(streams)]
        piece = os.urandom(PIECE)
        cpu0, started = _cpu_s(), time.perf_counter()

        async def fill(bi: object) -> None:
            writer = bi.send()  # type: ignore[attr-defined]
            for _ in range(total // streams // PIECE):
                await writer.write_all(piece)

        await asyncio.gather(*(fill(bi) for bi in bis))
        await bis[0].recv().read_exact(1)
        seconds, cpu = time.perf_counter() - started, _cpu_s() - cpu0
        await bis[0].send().finish()
        out, _ = receiver.communicate(timeout=60)
    except BaseException:
        receiver.kill()  # by its pid; it has not finished on its own
        receiver.wait()
        raise
    await ep.close()
    return {"s": seconds, "send_cpu": cpu, "recv_cpu": json.loads(out)["cpu_s"]}


def run(mib: int, streams: int, land: Path | None = None) -> dict[str, float]:
    """One measurement in fresh processes (loopback, no relay), landing under `land` if given."""
    env = dict(os.environ, SWJOB_IROH_RELAY="disabled", SWJOB_IROH_BIND="127.0.0.1:0")
    env["PYTHONPATH"] = str(HERE.parents[2])
    cmd = [sys.executable, str(HERE), "--send", "--mib", str(mib), "--streams", str(streams)]
    cmd += ["--land", str(land)] if land else []
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--land", type=Path, help="also write the bytes into files under LAND")
    parser.add_argument("--send", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--receive", metavar="TICKET", help=argparse.SUPPRESS)
    args = parser.parse_args()
    total = args.mib * MiB
    if args.receive:
        asyncio.run(_receive(args.receive, total, args.streams, args.land))
    elif args.send:
        print(json.dumps(asyncio.run(_send(total, args.streams, args.land))))
    else:
        print(json.dumps(run(args.mib, args.streams, args.land)))


if __name__ == "__main__":
    main()
