"""Local listeners only the operator's own processes can use, and that nobody can starve.

Another local user must neither reach the engine's access point or a forwarded port,
nor hold so many connections that the engine runs out of file descriptors (a run
lost its outputs to "Too many open files" that way). So:

- the engine's access point and `swjob forward`'s default local end are Unix sockets in
  the private (0700) live dir: other users cannot even connect. A socket address is at
  most ~104 bytes; where that dir's path is longer, the socket goes to a fresh 0700
  dir of this user's in the runtime dir (engine/state/paths.py), else in the temp dir
  (the access file, in the live dir, says where);
- every accepted connection is checked for its owner: the peer's uid (SO_PEERCRED on
  Linux, LOCAL_PEERCRED on macOS) for a Unix socket; for loopback TCP (a forwarded port
  a browser uses), the uid the kernel lists for the peer's end in /proc/net/tcp. A
  stranger's connection is closed before a byte is read or relayed;
- every listener holds at most `cap` connections at once; one more is closed as soon as
  it is accepted, so the descriptors a flood can take are bounded.

A client checks the other way round before it sends anything (`peer`): the listener
must belong to this user and be the process the access file names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import struct
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from engine.state.paths import runtime_dir

log = logging.getLogger("swjob.live")

SUN_PATH_MAX = 100  # sockaddr_un's sun_path: 108 bytes on Linux, 104 on macOS; and a NUL
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def socket_path(private_dir: Path, name: str) -> Path:
    """Where a socket called `name` goes: the private dir, or a fresh private dir in the
    runtime dir (else the temp dir) when the private dir's path is too long for a socket
    address."""
    path = private_dir / name
    if _fits(path):
        return path
    base = runtime_dir()
    if base is not None and _fits(base / "swjob-12345678" / name):  # mkdtemp's length
        return Path(tempfile.mkdtemp(prefix="swjob-", dir=base)) / name  # made 0700
    return Path(tempfile.mkdtemp(prefix="swjob-")) / name


def _fits(path: Path) -> bool:
    return len(os.fsencode(path)) <= SUN_PATH_MAX


def remove_socket(path: Path, private_dir: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
    if path.parent != private_dir:  # a temp dir of ours (socket_path)
        shutil.rmtree(path.parent, ignore_errors=True)


def peer(sock: socket.socket) -> tuple[int | None, int | None]:
    """(pid, uid) of a Unix socket's other end, each None where the platform cannot say."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux: struct ucred {pid, uid, gid}
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        pid, uid, _gid = struct.unpack("3i", raw)
        return pid, uid
    local_peercred = getattr(socket, "LOCAL_PEERCRED", None)
    if local_peercred is not None:  # macOS: struct xucred {version, uid, ...}
        raw = sock.getsockopt(0, local_peercred, 76)
        return None, struct.unpack_from("2I", raw)[1]
    return None, None


def tcp_peer_uid(sock: socket.socket) -> int | None:
    """The uid owning the other end of a loopback TCP connection (Linux's /proc/net/tcp
    lists it); None where that cannot be read (no /proc), -1 when the row is not there
    (the peer already gone, or not on this machine)."""
    try:
        table = Path("/proc/net/tcp").read_text()
    except OSError:
        return None
    ours, theirs = (_hex_addr(a) for a in (sock.getsockname(), sock.getpeername()))
    for row in table.splitlines()[1:]:
        fields = row.split()
        if len(fields) > 7 and fields[1] == theirs and fields[2] == ours:
            return int(fields[7])
    return -1


def _hex_addr(addr: tuple[str, int]) -> str:
    """An IPv4 (address, port) as /proc/net/tcp writes it: the address's bytes as the
    kernel stores them (little-endian on the machines swjob runs on), the port big-endian."""
    packed = socket.inet_aton(addr[0])
    return f"{int.from_bytes(packed, 'little'):08X}:{addr[1]:04X}"


def owned_by_us(writer: asyncio.StreamWriter) -> bool:
    """Is this accepted connection's other end a process of this user?"""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return False
    uid = peer(sock)[1] if sock.family == socket.AF_UNIX else tcp_peer_uid(sock)
    return uid is None or uid == os.getuid()  # None: the platform gives no way to tell


def guarded(handler: Handler, cap: int, refused: Callable[[str], None]) -> Handler:
    """`handler` for connections of this user's only, at most `cap` at once: any other is
    closed at once (`refused` is told why)."""
    active = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal active
        if active >= cap:
            writer.transport.abort()
            refused(f"more than {cap} connections at once")
            return
        if not owned_by_us(writer):
            writer.transport.abort()
            refused("a connection from another user")
            return
        active += 1
        try:
            await handler(reader, writer)
        finally:
            active -= 1

    return handle


async def unix_server(handler: Handler, path: Path, limit: int = 2**16) -> asyncio.Server:
    """Listen on a Unix socket at `path` (0600; a socket left there by a dead process of
    ours is replaced)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = await asyncio.start_unix_server(handler, path=str(path), limit=limit)
    os.chmod(path, 0o600)
    return server
