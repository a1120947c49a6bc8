"""Strangers on the control service cannot make the engine hold memory, stall
it, or write into its output: frames before admission are capped at 64 KiB, a hello
must come within 5 s, and only 4 connections per peer (32 in all) may await admission.
Every peer here is a real iroh endpoint on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from iroh import iroh_ffi

from agent import endpoint as iroh_endpoint
from agent.protocol import CTL_ALPN, Channel, Hello, NodeFacts, Reject
from engine.run import control
from engine.run.control import HELLO_MAX_FRAME, HELLO_TIMEOUT_S
from engine.run.peergate import MAX_UNADMITTED_PER_PEER
from tests.security.helpers import (
    engine_addr,
    rogues,
    waiting_run,
)
from tests.support.engines import engine_with
from tests.support.waiting import eventually_async

pytestmark = [pytest.mark.timeout(120)]

HOSTILE = 100
ROGUES = 10  # endpoints; each dials HOSTILE // ROGUES times
JUNK = 1 << 20  # what each hostile connection tries to make the engine buffer
RSS_CEILING_MB = 60  # growth allowed; without the limits this attack took 67 → 310 MB
FACTS = NodeFacts(
    hostname="rogue", os="linux", cpus=1, memory_mb=1, disk_free_mb=1,
    python_version="3.11", agent_version="0",
)  # fmt: skip


async def oversize(ep: Any, addr: Any) -> str:
    """Dial, announce a 16 MiB frame and push JUNK bytes of it; the close reason. The
    engine may close a connection before the stream is even open (busy); iroh then
    sometimes reports an empty reason, or "reset by peer" when the close meets bytes
    still in flight on a loaded machine — but the engine did hang up."""
    try:
        conn = await ep.connect(addr, CTL_ALPN)
        bi = await conn.open_bi()
        with contextlib.suppress(iroh_ffi.IrohError):
            await bi.send().write_all(struct.pack(">I", 16 << 20) + b"x" * JUNK)
        return str(await asyncio.wait_for(conn.closed(), 15))
    except iroh_ffi.IrohError as exc:
        return str(exc)


async def test_oversize_hello_frame_is_refused(tmp_path, caplog, record_fault) -> None:
    caplog.set_level(logging.INFO, logger="swjob.control")
    async with engine_with(tmp_path / "runs") as engine, rogues(1) as (ep,):
        addr = iroh_endpoint.addr_from_ticket(iroh_endpoint.ticket_of(engine._endpoint))
        started = time.monotonic()
        reason = await oversize(ep, addr)
        took = time.monotonic() - started
        # positive control: a hello just under the cap is read (and refused as unknown run)
        conn = await ep.connect(addr, CTL_ALPN)
        bi = await conn.open_bi()
        channel = Channel(bi.recv(), bi.send())
        big_id = "r" * (HELLO_MAX_FRAME - 1024)
        await channel.send(Hello(run_id=big_id, token="t", facts=FACTS))
        answer = await asyncio.wait_for(channel.recv(), 10)
    messages = [r.getMessage() for r in caplog.records if r.name == "swjob.control"]
    assert "no hello" in reason and took < HELLO_TIMEOUT_S, (reason, took)
    assert any(f"exceeds {HELLO_MAX_FRAME}" in m for m in messages), messages
    assert answer == Reject(reason="unknown run")
    record_fault(
        "stranger sends a 16 MiB frame before its hello", took, "connection closed, frame unread"
    )


SILENT_HELLO_S = 2.0
"""The hello timeout of the silent-peers test: long enough that the extra connection is
refused as busy well before the silent ones are cut, short enough not to wait out 5 s."""


async def test_silent_peers_are_cut_and_limited_per_peer(
    tmp_path, record_fault, monkeypatch
) -> None:
    monkeypatch.setattr(control, "HELLO_TIMEOUT_S", SILENT_HELLO_S)
    async with engine_with(tmp_path / "runs") as engine, rogues(1) as (ep,):
        addr = iroh_endpoint.addr_from_ticket(iroh_endpoint.ticket_of(engine._endpoint))
        started = time.monotonic()
        silent = [await ep.connect(addr, CTL_ALPN) for _ in range(MAX_UNADMITTED_PER_PEER)]
        await eventually_async(lambda: engine._server.gate.waiting == MAX_UNADMITTED_PER_PEER)
        extra = await ep.connect(addr, CTL_ALPN)
        busy = str(await asyncio.wait_for(extra.closed(), 30))
        busy_after = time.monotonic() - started
        cut = [str(await asyncio.wait_for(c.closed(), SILENT_HELLO_S + 5)) for c in silent]
        cut_after = time.monotonic() - started
        await eventually_async(lambda: engine._server.gate.waiting == 0)
    assert "busy" in busy and busy_after < SILENT_HELLO_S, (busy, busy_after)
    assert all("no hello" in r for r in cut), cut
    assert SILENT_HELLO_S - 0.5 <= cut_after <= SILENT_HELLO_S + 3, cut_after
    record_fault(
        f"one stranger holds {MAX_UNADMITTED_PER_PEER} silent connections, dials one more",
        cut_after,
        f"extra closed at once (busy, {busy_after:.2f} s); silent ones cut at the hello timeout",
    )


# ---- 100 hostile connections against `swjob run` --------------------------------------


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


async def test_hundred_hostile_connections_leave_memory_bounded_and_the_run_completes(
    tmp_path, make_job, clis, record_fault
) -> None:
    go = tmp_path / "go"
    job = make_job(run=waiting_run(go, after="echo landed > out.txt"), outputs=["out.txt"])
    cli = clis("run", str(job.source), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    await eventually_async(lambda: cli.has_printed("run | started"))
    before = rss_mb(cli.pid)
    addr = engine_addr(Path(os.environ["SWJOB_STATE_DIR"]))
    started = time.monotonic()
    async with rogues(ROGUES) as eps:
        attack = asyncio.gather(
            *(oversize(eps[i % ROGUES], addr) for i in range(HOSTILE)),
            return_exceptions=True,
        )
        peak = before
        while not attack.done():  # the highest RSS while the attack lasts
            peak = max(peak, rss_mb(cli.pid))
            await asyncio.wait([attack], timeout=0.05)
        reasons = attack.result()
    took = time.monotonic() - started
    go.touch()
    code = await asyncio.to_thread(cli.wait, 60)
    printed = cli.output()
    (run_dir,) = (tmp_path / "runs").glob("*/*")
    said = [str(r) for r in reasons]
    assert all(isinstance(r, str) for r in reasons), {r for r in said if "closed by" not in r}
    engine_hung_up = ("no hello", "busy", "reset by peer")
    assert {r for r in said if r and not any(why in r for why in engine_hung_up)} == set()
    assert sum("no hello" in r for r in said) >= ROGUES * MAX_UNADMITTED_PER_PEER // 2
    assert peak - before < RSS_CEILING_MB, (before, peak)
    assert code == 0 and (run_dir / "outputs" / "out.txt").read_text() == "landed\n", printed
    record_fault(
        f"{HOSTILE} stranger connections ({ROGUES} endpoints) each push 1 MiB of a 16 MiB frame",
        took,
        f"all closed; engine RSS {before:.0f} → {peak:.0f} MB; the run COMPLETED",
    )
