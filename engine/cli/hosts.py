"""`swjob hosts`: the hosts remembered as bad (engine/state/badhosts.py) and left out of
offer selection until their time is up; `swjob hosts forget ID|--all` clears them."""

from __future__ import annotations

import argparse
import sys
import time


def add_parser(sub: argparse._SubParsersAction) -> None:
    hosts = sub.add_parser("hosts", help="list the hosts remembered as bad; forget them")
    verbs = hosts.add_subparsers(dest="verb")
    forget = verbs.add_parser("forget", help="rent from a remembered host again")
    forget.add_argument("machine", nargs="?", help="the machine id `swjob hosts` shows")
    forget.add_argument("--all", action="store_true", help="every remembered host")


def main(args: argparse.Namespace) -> int:
    from engine.state import badhosts

    if args.verb == "forget":
        if (args.machine is None) == (not args.all):
            print("error: swjob hosts forget: give a machine id or --all", file=sys.stderr)
            return 1
        gone = badhosts.forget(None if args.all else args.machine)
        if not gone and not args.all:
            print(f"error: machine {args.machine} is not remembered", file=sys.stderr)
            return 1
        print(f"forgot {len(gone)} host(s)")
        return 0
    hosts = badhosts.listed()
    if not hosts:
        print("no host remembered as bad")
    now = time.time()
    for host in hosts:
        left_h = (host.until - now) / 3600
        print(f"{host.provider} machine {host.machine_id}: {host.reason} ({left_h:.0f} h left)")
    return 0
