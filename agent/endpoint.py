"""One iroh endpoint per process, bound the same way on both sides.

Relays: real use keeps iroh's default relays so nodes behind NAT can reach the
operator. Tests and offline machines set `SWJOB_IROH_RELAY=disabled`, which binds
to loopback-reachable direct addresses only, with iroh's minimal preset: no relay and
no address discovery either. The n0 preset with relays disabled still published each
endpoint's address over HTTPS and raced a DNS lookup for every peer it dialed, which
cannot help where relays are off (tickets carry the direct addresses) and, with no
internet, only retried: perf saw its resolver among the iroh thread's busiest code at a
hundred runs at once. `online()` is never awaited: it waits for a relay and would hang
without the internet.
"""

from __future__ import annotations

import asyncio
import os

from iroh import iroh_ffi

from agent import irohfix  # noqa: F401  (applies the send-path fix on import)
from agent.protocol import CODE_ALPN, CTL_ALPN, XFER_ALPN
from agent.transfer.memory import pin_malloc

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


async def bind(
    *,
    accept: bool,
    secret_key: bytes | None = None,
    port: int | None = None,
    alpns: list[bytes] | None = None,
) -> iroh_ffi.Endpoint:
    """Bind this process's endpoint; `accept` registers our ALPNs so peers can dial us.

    `secret_key` fixes the endpoint id (the operator keeps one across restarts, so its
    nodes still obey it); `alpns` replaces the operator's services (the agent serves only
    its resume service); `port` asks for the same UDP port as last time, so a node
    that knows only our old direct address can find us again without a relay.
    """
    pin_malloc()
    bind_uniffi_loop()
    relays = relays_enabled()
    options = iroh_ffi.EndpointOptions(
        preset=iroh_ffi.preset_n0() if relays else iroh_ffi.preset_minimal(),
        relay_mode=None if relays else iroh_ffi.RelayMode.disabled(),
        alpns=alpns or ([CTL_ALPN, XFER_ALPN, CODE_ALPN] if accept else None),
        bind_addr=_bind_addr(port),
        secret_key=secret_key,
    )
    return await iroh_ffi.Endpoint.bind(options)


def _bind_addr(port: int | None) -> str | None:
    configured = os.environ.get(BIND_ENV) or None
    if port is None:
        return configured
    host = configured.rsplit(":", 1)[0] if configured else "0.0.0.0"
    return f"{host}:{port}"


def chosen_port() -> int | None:
    """The port SWJOB_IROH_BIND names; None where it names none, or 0 (any port)."""
    port = (os.environ.get(BIND_ENV) or "").rpartition(":")[2]
    return int(port) if port.isdigit() and int(port) else None


def bound_port(endpoint: iroh_ffi.Endpoint) -> int | None:
    """The UDP port of the endpoint's first IPv4 socket."""
    for sock in endpoint.bound_sockets():
        host, _, port = sock.rpartition(":")
        if "." in host and port.isdigit():
            return int(port)
    return None


def ticket_of(endpoint: iroh_ffi.Endpoint) -> str:
    """The endpoint's address as one string: the bootstrap value a node dials."""
    return str(iroh_ffi.EndpointTicket.from_addr(endpoint.addr()))


def addr_from_ticket(ticket: str) -> iroh_ffi.EndpointAddr:
    return iroh_ffi.EndpointTicket.from_string(ticket).endpoint_addr()
