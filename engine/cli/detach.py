"""`swjob run --detach`: submit, then leave the run to a background swjob process.

The job, its `--env` and its pool are checked here first, so a mistake is said at once;
then a `swjob run` of the same job starts in a session of its own (a closed terminal
does not reach it), writing what it prints to a private file in the state dir, and this
returns once that process has submitted the run and owns it — printing the run id and
the commands that reach it: `swjob logs -f`, `swjob attach`, `swjob stop`. Should that
process die, the run is like any other whose swjob died: `swjob attach` carries it on,
and the node's own orphan timer still ends it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

SUBMIT_WAIT_S = 120.0
_SUBMITTED = re.compile(r"^run (\S+) → ", re.M)


def detach(args: argparse.Namespace) -> int:
    from engine.jobs.envargs import with_env
    from engine.jobs.jobspec import load_job
    from engine.jobs.pools import load_pools
    from engine.state.paths import state_dir
    from engine.state.planted import own_subdir

    load_pools(args.pools).get(args.pool)
    with_env(load_job(args.job), args.env, os.environ)  # said here, before anything starts
    argv, env = _child(args)
    out = (
        own_subdir(state_dir() / "detached") / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    )
    with out.open("xb") as sink:
        child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
    run_id = _submitted(child, out)
    if run_id is None:
        sys.stdout.write(out.read_text(errors="replace"))
        print(f"error: the background swjob ended before submitting the run (see {out})",
              file=sys.stderr)  # fmt: skip
        return 1
    short = run_id.rsplit("-", 1)[-1]
    print(f"run {run_id} submitted; a background swjob (pid {child.pid}) drives it")
    print(
        f"  follow: swjob logs -f {short}   watch: swjob attach {short}   stop: swjob stop {short}"
    )
    print(f"  its output: {out}")
    return 0


def _child(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The background `swjob run`'s command line and environment: the same run, every path
    absolute, and `--env NAME=VALUE` passed as NAME in its environment — a secret on a
    command line is any local user's to read (`ps`)."""
    argv = [sys.executable, "-m", "engine.cli.main", "run", str(args.job.absolute())]
    argv += ["--pool", args.pool, "--runs-dir", str(args.runs_dir.absolute())]
    if args.pools is not None:
        argv += ["--pools", str(args.pools.absolute())]
    if args.sync_every is not None:
        argv += ["--sync-every", f"{args.sync_every:g}"]
    if args.attempts is not None:
        argv += ["--attempts", str(args.attempts)]
    env = dict(os.environ)
    for item in args.env:
        name, sep, value = item.partition("=")
        if sep:
            env[name] = value
        argv += ["--env", name]
    return argv, env


def _submitted(child: subprocess.Popen[bytes], out: Path) -> str | None:
    """The run id once the child has printed it; None if the child ended first."""
    deadline = time.monotonic() + SUBMIT_WAIT_S
    while time.monotonic() < deadline:
        found = _SUBMITTED.search(out.read_text(errors="replace"))
        if found:
            return found.group(1)
        if child.poll() is not None:
            return None
        time.sleep(0.05)
    return None
