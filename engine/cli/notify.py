"""`swjob notify --test`: send one message to every `notify` target of the pools file and
say, per target (by its service: the URL holds a token), whether it was taken."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    notify = sub.add_parser("notify", help="check the pools file's notification targets")
    notify.add_argument("--test", action="store_true", help="send a test message to each")
    notify.add_argument("--pools", type=Path, default=None, help="pools TOML file")


def main(args: argparse.Namespace) -> int:
    from engine.jobs.pools import load_pools
    from engine.watch.notifier import all_targets, send_once, service

    pools = load_pools(args.pools)
    targets = all_targets([pools.notify, *(pool.notify for pool in pools)])
    if not targets:
        print("no notification targets: add `notify = [...]` to the pools file", file=sys.stderr)
        return 1
    if not args.test:
        for index, url in enumerate(targets, 1):
            print(f"{index}. {service(url)}")
        return 0
    failed = 0
    for index, url in enumerate(targets, 1):
        ok = send_once(url, "swjob: test", "a test notification from `swjob notify --test`")
        failed += not ok
        print(f"{index}. {service(url)} {'ok' if ok else 'FAILED (see docs/notifications.md)'}")
    return 1 if failed else 0
