"""`swjob stop RUN`: prints what engine/ops/stop.py did."""

from __future__ import annotations

import argparse
import asyncio
import sys

from engine.cli.lookup import find_run, no_such_run, run_pools


def stop(args: argparse.Namespace) -> int:
    from engine.ops.stop import StopError, stop_run
    from engine.report.printable import visible

    view = find_run(args.run)
    if view is None:
        print(f"error: {no_such_run(args.run)}", file=sys.stderr)
        return 1
    if view.finished is not None:
        print(f"run {view.run_id} is already over: {view.state}")
        return 0
    print(f"stopping run {view.run_id} …", flush=True)
    try:
        ended = asyncio.run(stop_run(view, run_pools(args.pools)))
    except StopError as exc:
        print(f"error: {visible(str(exc))}", file=sys.stderr)
        return 1
    reason = f" — {visible(ended.reason)}" if ended.reason else ""
    print(f"run {ended.run_id}: {ended.state}{reason}")
    return 0
