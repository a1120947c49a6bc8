"""One iroh endpoint per process, bound the same way on both sides.

Relays: real use keeps iroh's default relays so nodes behind NAT can reach the
operator. Tests and offline machines set `SWJOB_IROH_RELAY=disabled`, which binds
to loopback-reachable direct addresses only. `online()` is never awaited: it waits
for a relay and would hang without the internet.
"""

from __future__ import annotations

import asyncio
import os

from iroh import iroh_ffi

from agent import irohfix  # noqa: F401  (applies the send-path fix on import)
from agent.protocol import CTL_ALPN, XFER_ALPN

RELAY_ENV = "SWJOB_IROH_RELAY"
BIND_ENV = "SWJOB_IROH_BIND"

_loop_bound: asyncio.AbstractEventLoop | None = None


def relays_enabled() -> bool:
    return os.environ.get(RELAY_ENV, "default").strip().lower() not in {"disabled", "off", "0"}


def bind_uniffi_loop() -> None:
    """Tell the binding which loop runs its callbacks (once per running loop)."""
    global _loop_bound
    loop = asyncio.get_running_loop()
    if _loop_bound is not loop:
        iroh_ffi.uniffi_set_event_loop(loop)
        _loop_bound = loop


async def bind(*, accept: bool) -> iroh_ffi.Endpoint:
    """Bind this process's endpoint; `accept` registers our ALPNs so peers can dial us."""
    bind_uniffi_loop()
    preset = iroh_ffi.preset_n0() if relays_enabled() else iroh_ffi.preset_n0_disable_relay()
    options = iroh_ffi.EndpointOptions(
        preset=preset,
        alpns=[CTL_ALPN, XFER_ALPN] if accept else None,
        bind_addr=os.environ.get(BIND_ENV) or None,
    )
    return await iroh_ffi.Endpoint.bind(options)


def ticket_of(endpoint: iroh_ffi.Endpoint) -> str:
    """The endpoint's address as one string: the bootstrap value a node dials."""
    return str(iroh_ffi.EndpointTicket.from_addr(endpoint.addr()))


def addr_from_ticket(ticket: str) -> iroh_ffi.EndpointAddr:
    return iroh_ffi.EndpointTicket.from_string(ticket).endpoint_addr()
