"""An engine's UDP port survives its restart: nodes that know only its old direct address
(no relay) find it there again. The port is drawn outside the kernel's ephemeral range,
so no `bind(0)` (iroh's DNS queries bind dozens a second) takes it while the engine is down."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from agent.endpoint import chosen_port
from engine.state import identity
from engine.state.paths import state_dir
from tests.support.engines import EngineFactory

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


@pytest.mark.skipif(not EPHEMERAL.exists(), reason="Linux's ephemeral port range")
def test_fresh_ports_are_never_handed_out_by_bind_0() -> None:
    low, _high = map(int, EPHEMERAL.read_text().split())
    assert identity.STABLE_PORTS.stop <= low


@pytest.mark.parametrize(
    ("bind", "port"), [(None, None), ("127.0.0.1:0", None), ("0.0.0.0:4433", 4433)]
)
def test_a_port_is_chosen_only_when_the_bind_setting_names_one(
    monkeypatch: pytest.MonkeyPatch, bind: str | None, port: int | None
) -> None:
    if bind is None:
        monkeypatch.delenv("SWJOB_IROH_BIND", raising=False)
    else:
        monkeypatch.setenv("SWJOB_IROH_BIND", bind)
    assert chosen_port() == port


async def test_an_engine_whose_port_was_taken_moves_to_one_it_keeps(
    make_engine: EngineFactory,
) -> None:
    """Last time's port held by another socket (the way a DNS query takes a freed ephemeral
    port): the engine binds a fresh stable port and remembers it for its next start."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        taken = squatter.getsockname()[1]
        remembered = state_dir() / "engine-0.port"
        remembered.write_text(str(taken))
        await make_engine()
        port = int(remembered.read_text())
    assert port != taken and port in identity.STABLE_PORTS
