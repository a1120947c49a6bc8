"""A rented node's first step when the operator ships the agent: fetch its code, check it,
run it.

The on-start command runs this file's text, compressed inline, as
`python3 -P -c <program> SHA256 <agent args>` (engine/providers/vast_boot.py), before any of
swjob is on the node: it imports only the
standard library and iroh (in the agent's closure, installed just before). It dials the
operator's endpoint named by the agent's own `--ticket`, makes sure the peer is the
`--orchestrator-id` the agent obeys, asks for the agent's code with the run's join token
(asking does not spend it: the agent's hello does), and checks what came against the
SHA-256 the boot command names before a line of it runs. Then it unpacks the bundle beside
itself and starts the agent from it, with the same arguments. So a node runs exactly the
operator's agent however swjob was installed there — from a checkout, a wheel, a git URL —
and needs nothing of swjob from any package index.

No import of `agent` here: none is on the node yet. tests/unit/test_agent_bundle.py keeps
the constants equal to the agent's.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import runpy
import sys
import time
import zipfile
from pathlib import Path

from iroh import iroh_ffi

CODE_ALPN = b"swjob/code/1"  # agent/protocol.py
TOKEN_ENV = "SWJOB_JOIN_TOKEN"  # agent/credentials.py
MAX_BUNDLE = 16 * 1024 * 1024
DIAL_FOR_S = 120.0  # the operator may be briefly unreachable while relays settle
CODE_DIR = "agent-code"


def _arg(name: str) -> str:
    return sys.argv[sys.argv.index(name) + 1]


async def _ask(endpoint: iroh_ffi.Endpoint) -> bytes:
    addr = iroh_ffi.EndpointTicket.from_string(_arg("--ticket")).endpoint_addr()
    conn = await endpoint.connect(addr, CODE_ALPN)
    if str(conn.remote_id()) != _arg("--orchestrator-id"):
        conn.close(1, b"not my orchestrator")
        raise SystemExit("swjob: the peer serving the agent's code is not this run's operator")
    stream = await conn.open_bi()
    ask = {"run_id": _arg("--run-id"), "token": os.environ.get(TOKEN_ENV, "")}
    await stream.send().write_all(json.dumps(ask).encode())
    await stream.send().finish()
    bundle = bytearray()
    while piece := await stream.recv().read(1 << 20):
        bundle += piece
        if len(bundle) > MAX_BUNDLE:
            raise SystemExit(f"swjob: the agent's code is over {MAX_BUNDLE} bytes")
    conn.close(0, b"thanks")
    if not bundle:
        raise ConnectionError("the operator sent no code (it refused the run's token?)")
    return bytes(bundle)


async def fetch() -> bytes:
    """The bundle the operator serves, dialled again until DIAL_FOR_S has passed."""
    iroh_ffi.uniffi_set_event_loop(asyncio.get_running_loop())
    relays = os.environ.get("SWJOB_IROH_RELAY", "default").strip().lower()
    preset = (
        iroh_ffi.preset_n0_disable_relay()
        if relays in {"disabled", "off", "0"}
        else iroh_ffi.preset_n0()
    )
    bind = os.environ.get("SWJOB_IROH_BIND") or None
    options = iroh_ffi.EndpointOptions(preset=preset, alpns=None, bind_addr=bind, secret_key=None)
    endpoint = await iroh_ffi.Endpoint.bind(options)
    give_up = time.monotonic() + DIAL_FOR_S
    try:
        while True:
            try:
                return await _ask(endpoint)
            except Exception as exc:  # the binding's errors have no common base
                if time.monotonic() > give_up:
                    raise SystemExit(f"swjob: could not fetch the agent's code: {exc}") from None
                print(f"swjob: fetching the agent's code: {exc}; trying again", file=sys.stderr)
                await asyncio.sleep(2.0)
    finally:
        await endpoint.close()


def unpack(bundle: bytes, expected: str, into: Path) -> Path:
    """The bundle's files under `into/<sha256>`, once they match `expected`: nothing of a
    bundle that does not is written, let alone run."""
    found = hashlib.sha256(bundle).hexdigest()
    if found != expected:
        raise SystemExit(
            f"swjob: the agent's code has SHA-256 {found}, not the {expected} the boot "
            "command names; not running it"
        )
    home = into / expected
    if not home.is_dir():
        partial = into / f".{expected}.{os.getpid()}"
        with zipfile.ZipFile(io.BytesIO(bundle)) as archive:
            archive.extractall(partial)
        partial.rename(home)
    return home


def main() -> None:
    expected = sys.argv.pop(1)
    home = unpack(asyncio.run(fetch()), expected, Path(CODE_DIR).absolute())
    sys.path.insert(0, str(home))
    sys.argv[0] = "swjob-agent"
    runpy.run_module("agent", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
