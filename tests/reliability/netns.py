"""A node behind its own network link: a network namespace joined to the host by a veth pair.

Taking the host end of the link down is a real network cut — packets stop, nothing is
closed, and only heartbeats can tell. `NetnsProvider` is the local provider with one
difference: the agent starts inside the namespace (`ip netns exec`), binding its endpoint
on the namespace's address, so everything it says to the engine crosses the veth.
Names carry a random tag, so parallel or leftover runs never collide; `close()` always
removes the link and the namespace.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess

from engine.providers.local import LocalProvider


def netns_unavailable() -> str | None:
    """Why a namespace cannot be made here (None if it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, check=False)
    if probe.returncode != 0:
        return f"`ip netns` is unavailable: {probe.stderr.decode().strip()}"
    return None


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True)


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.200.x.0/30 that no interface of the host uses yet."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    for _ in range(64):
        net = ipaddress.IPv4Network(f"10.200.{secrets.randbelow(256)}.0/30")
        if f" {net.network_address + 1}/" not in used and f" {net[2]}/" not in used:
            return net
    raise RuntimeError("no free 10.200.x.0/30 subnet")


class Netns:
    """One namespace and its veth pair; host side .1, node side .2 of a /30."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.name = f"swjr-{tag}"
        self.host_if, self.node_if = f"swjr{tag}h", f"swjr{tag}n"
        net = _free_subnet()
        self.host_ip, self.node_ip = str(net[1]), str(net[2])

    def open(self) -> Netns:
        try:
            _ip("netns", "add", self.name)
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.node_if)
            _ip("link", "set", self.node_if, "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            _ip("-n", self.name, "addr", "add", f"{self.node_ip}/30", "dev", self.node_if)
            _ip("-n", self.name, "link", "set", self.node_if, "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        return self

    def cut(self) -> None:
        """Take the link down: from now on no packet crosses between node and engine."""
        _ip("link", "set", self.host_if, "down")

    def close(self) -> None:
        _ip("link", "del", self.host_if, check=False)  # removes the peer end too
        _ip("netns", "del", self.name, check=False)


def netns_provider(
    netns: Netns, max_nodes: int = 4, *, stop_grace_s: float = 10.0
) -> LocalProvider:
    """The local pool, but each agent runs inside `netns` (`ip netns exec` execs in place, so
    the pid is the agent's) and binds its endpoint on the namespace's address."""
    return LocalProvider(
        max_nodes,
        stop_grace_s=stop_grace_s,
        launcher=["ip", "netns", "exec", netns.name],
        agent_env={"SWJOB_IROH_BIND": f"{netns.node_ip}:0"},
    )
