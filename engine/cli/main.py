"""`swjob`: the headless CLI — run, sweep, validate, plan, runs, logs, attach, stop, shell,
forward, pull, gc, nodes, notify, hosts.

Exit codes: 0 success (a run COMPLETED), 1 the run FAILED or the input was invalid,
2 usage errors (argparse), 130 when a stopped run could not even be stopped cleanly,
141 when the reader of its output went away (`swjob runs | head`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.cli import hosts, nodes, notify, sweepargs
from engine.errors import UnusableDirError
from engine.jobs.fileerror import ConfigFileError
from engine.state.paths import DEFAULT_RUNS_DIR
from engine.state.private import set_private_umask

if TYPE_CHECKING:  # imported where used: each subcommand loads only what it needs
    from engine.jobs.pools import PoolSet

# Each subcommand imports what it needs when it runs (pydantic, rich, asyncio, iroh, the
# Vast SDK): `swjob validate` must not pay for `swjob run`'s machinery.

_QUICK_EXIT = {"run", "sweep", "attach", "shell", "forward", "stop", "offers", "pools", "pull"}
"""Commands that load the engine's machinery end without the interpreter's teardown
(agent/quickexit.py): by the time they return, the engine is closed and its files are
written, and freeing those modules took longer than some whole commands. `pull` ends so
for another reason too: the object store client's Tokio runtime is never shut down, and
a worker of it still busy as the interpreter tore itself down aborted the process
(SIGABRT, exit -6) after every file had landed verified — seen under load."""


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="swjob", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=_Version, help="print swjob's version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="run a job end to end and follow it")
    run.add_argument("job", type=Path)
    _pool_args(run)
    run.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR)
    run.add_argument(
        "--sync-every",
        type=_seconds,
        default=None,
        metavar="S",
        help="while `run` runs, pull changed outputs every S seconds (0: never); "
        "default: the pool's sync_every_s (300 on interruptible pools, else never)",
    )
    run.add_argument(
        "--attempts",
        type=_attempts,
        default=None,
        metavar="N",
        help="run again on a new node, up to N attempts in all, when the node is preempted or "
        "lost (never when the job itself fails); default: the pool's max_attempts (1)",
    )
    run.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="add NAME to the job's env, its value from your environment (or VALUE): a "
        "secret like every job env value; repeat for more",
    )
    run.add_argument(
        "-d",
        "--detach",
        action="store_true",
        help="return once the run is submitted, a background swjob process driving it",
    )
    run.add_argument(
        "--cold",
        action="store_true",
        help="rent a fresh node even when the pool keeps a warm one that fits",
    )
    sweepargs.add_parser(sub)
    sub.add_parser("validate", help="check a job file").add_argument("job", type=Path)
    plan = sub.add_parser("plan", help="show what would be pushed, before renting anything")
    plan.add_argument("job", type=Path)
    plan.add_argument(
        "--explain", action="store_true", help="say which rule kept or excluded each path"
    )
    plan.add_argument(
        "--runs-dir", type=Path, default=DEFAULT_RUNS_DIR, help="left out like `swjob run` does"
    )
    runs = sub.add_parser("runs", help="list past and current runs")
    runs.add_argument("--limit", type=int, default=50)
    runs.add_argument("--sweep", metavar="SWEEP", help="the runs of one sweep, as a table")
    logs = sub.add_parser("logs", help="print a run's setup and run output")
    logs.add_argument("run", help="run id (or a unique prefix)")
    logs.add_argument("--step", choices=["setup", "run", "all"], default="all")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="follow a live run's log until it ends"
    )
    attach = sub.add_parser("attach", help="follow a run; recovers it if its engine died")
    attach.add_argument("run", help="run id (or a unique prefix)")
    attach.add_argument("--pools", type=Path, default=None, help="pools TOML file")
    shell = sub.add_parser("shell", help="an interactive shell on a live run's node")
    shell.add_argument("run", help="run id (or a unique prefix)")
    fwd = sub.add_parser("forward", help="forward a local socket or port to a run's node")
    fwd.add_argument("run", help="run id (or a unique prefix)")
    fwd.add_argument("remote_port", type=int, help="the port on the node")
    fwd.add_argument(
        "--local",
        type=int,
        default=None,
        metavar="PORT",
        help="listen on 127.0.0.1:PORT (default: a Unix socket only you can use)",
    )
    stop = sub.add_parser("stop", help="stop a run or a sweep, from any terminal (nodes torn down)")
    stop.add_argument("run", nargs="?", help="run id (or a unique prefix)")
    stop.add_argument("--sweep", metavar="SWEEP", help="stop this sweep instead: its id or start")
    stop.add_argument("--pools", type=Path, default=None, help="pools TOML file")
    offers = sub.add_parser("offers", help="the offers a pool would rent, cheapest first")
    offers.add_argument("pool", help="pool name")
    offers.add_argument("--pools", type=Path, default=None, help="pools TOML file")
    offers.add_argument("--json", action="store_true", help="print them as JSON")
    pools = sub.add_parser("pools", help="list the configured pools and check their API keys")
    pools.add_argument("--pools", type=Path, default=None, help="pools TOML file")
    completion = sub.add_parser("completion", help="print a shell completion script")
    completion.add_argument("shell", choices=["bash", "zsh"])
    gc = sub.add_parser("gc", help="find and destroy nodes no live run owns, in every pool")
    gc.add_argument("--pools", type=Path, default=None, help="pools TOML file")
    pull = sub.add_parser("pull", help="fetch a run's outputs from its sink, verified")
    pull.add_argument("run", help="run id (or a unique prefix), or the run's s3:// URL")
    pull.add_argument("--to", type=Path, default=None, help="directory to land them in")
    pull.add_argument("--endpoint", default=None, help="the sink's endpoint (R2, MinIO, …)")
    pull.add_argument("--region", default=None, help="the sink's region")
    gc.add_argument("--yes", action="store_true", help="destroy without asking")
    gc.add_argument(
        "--claim",
        action="append",
        default=[],
        type=_operator_id,
        metavar="OPERATOR_ID",
        help="also collect instances labelled with this operator id (your own, from a "
        "state dir since lost; shown in every label, swjob:ID:RUN)",
    )
    nodes.add_parser(sub)
    notify.add_parser(sub)
    hosts.add_parser(sub)
    return parser


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags: `gc --pool x` was taken for `--pools x` (and a pools file
    named x), and a flag added later must not change what an old abbreviation means."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=False, **kwargs)


class _Version(argparse.Action):
    """`swjob --version`: the installed distribution's version, read only when asked (the
    metadata lookup is not on every command's start-up path)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("swjob")
        except PackageNotFoundError:  # a source tree on sys.path, never installed
            found = "unknown (not installed)"
        print(f"swjob {found}")  # on stdout, as `--version` prints everywhere
        parser.exit()


def _pool_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pool", default="local", help="pool name (default: local)")
    parser.add_argument("--pools", type=Path, default=None, help="pools TOML file")


_NO_ENGINE = {"validate", "plan", "completion"}
"""Commands that read a job file and nothing of the engine: nothing there logs, and
`swjob validate` does not pay for importing logging."""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    set_private_umask()
    if args.command not in _NO_ENGINE:  # the engine's warnings: `swjob: …` on stderr
        from engine.logsetup import log_to_stderr

        log_to_stderr("swjob")
    code = _command(args)
    if args.command in _QUICK_EXIT:
        from agent.quickexit import exit_now

        exit_now(code)
    return code


def _command(args: argparse.Namespace) -> int:
    handler = _COMMANDS[args.command]
    try:
        code = handler(args)
        sys.stdout.flush()  # here, where a reader gone away is caught, not at exit
        return code
    except (ConfigFileError, UnusableDirError) as exc:  # already one line, printable
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `swjob runs | head`: the reader has all it wanted
        _drop_stdout()
        return 141  # what a shell reports for a writer ended by SIGPIPE


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what could not be
    written does not print a second error on the way out."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _validate(args: argparse.Namespace) -> int:
    from engine.jobs.jobspec import load_job

    job = load_job(args.job)
    print(f"{args.job}: ok (job {job.name!r})")
    return 0


def _plan(args: argparse.Namespace) -> int:
    from rich.console import Console

    from engine.jobs.jobspec import load_job
    from engine.jobs.plan import plan_workspace, render_plan
    from engine.state.paths import landing_excludes

    job = load_job(args.job)
    console = Console(highlight=False)
    if job.workspace is None:
        console.print(f"{args.job}: no workspace — nothing is pushed")
        return 0
    render_plan(
        plan_workspace(
            job.workspace.workdir,
            job.workspace.exclude + landing_excludes(job.workspace.workdir, args.runs_dir),
            job.env.values(),
        ),
        explain=args.explain,
        console=console,
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    import asyncio

    if args.detach:
        from engine.cli.detach import detach

        return detach(args)

    return asyncio.run(_start_and_run(args))


async def _start_and_run(args: argparse.Namespace) -> int:
    """On the local pool, the agents' fork server is started first: its imports (most
    of a node's start) then overlap ours, instead of following them."""
    if args.pool == "local":
        from engine.providers import localspawn

        localspawn.warm()
    from engine.cli.follow import run_and_follow
    from engine.jobs.envargs import with_env
    from engine.jobs.jobspec import load_job
    from engine.jobs.pools import load_pools

    job = with_env(load_job(args.job), args.env, os.environ)
    pools = load_pools(args.pools)
    pools.get(args.pool)
    if args.sync_every is not None:
        pools = pools.tuned(args.pool, sync_every_s=args.sync_every)
    if args.attempts is not None:
        pools = pools.tuned(args.pool, max_attempts=args.attempts)
    return await run_and_follow(job, pools, args.pool, args.runs_dir, cold=args.cold)


def _attempts(text: str) -> int:
    """How many attempts a run may take: 1 to 20."""
    if not text.isdigit() or not 1 <= int(text) <= 20:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 20: {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    """A duration in seconds for an option: a finite number, 0 to one day."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"must be between 0 and 86400 seconds: {text}")
    return value


def _attach(args: argparse.Namespace) -> int:
    import asyncio

    from engine.cli.follow import attach
    from engine.cli.lookup import run_pools

    return asyncio.run(attach(args.run, run_pools(args.pools)))


def _runs(args: argparse.Namespace) -> int:
    if args.sweep:
        from engine.cli.sweep import print_sweep

        return print_sweep(args.sweep)
    from rich.console import Console

    from engine.cli.runlist import print_runs

    print_runs(Console(highlight=False), args.limit)
    return 0


def _logs(args: argparse.Namespace) -> int:
    from engine.cli.runlist import print_logs

    return print_logs(args.run, args.step, args.follow)


def _sweep(args: argparse.Namespace) -> int:
    from engine.cli.sweep import command

    return command(args)


def _shell(args: argparse.Namespace) -> int:
    from engine.cli import live

    return _live(lambda: live.shell(args.run))


def _forward(args: argparse.Namespace) -> int:
    from engine.cli import live

    return _live(lambda: live.forward(args.run, args.remote_port, args.local))


def _live(command: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run a live command; a node that cannot be reached is one line and exit 1."""
    import asyncio

    from engine.run.liveops import LiveUnavailable

    try:
        return asyncio.run(command())
    except LiveUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _stop(args: argparse.Namespace) -> int:
    """`swjob stop RUN` or `swjob stop --sweep SWEEP`: exactly one of them."""
    if (args.run is None) == (args.sweep is None):
        print("swjob stop: name a run, or a sweep with --sweep (not both)", file=sys.stderr)
        return 2
    if args.sweep is not None:
        from engine.cli.sweep import stop_sweep

        return stop_sweep(args.sweep)
    from engine.cli.stop import stop

    return stop(args)


def _offers(args: argparse.Namespace) -> int:
    from engine.cli.offers import offers

    return offers(args)


def _pools(args: argparse.Namespace) -> int:
    from engine.cli.offers import pools

    return pools(args)


def _completion(args: argparse.Namespace) -> int:
    from engine.cli.completion import script

    print(script(_parser(), args.shell), end="")
    return 0


def _pull(args: argparse.Namespace) -> int:
    import asyncio

    from engine.cli.interrupt import until_interrupted
    from engine.cli.sinkpull import pull_and_say

    pulled = pull_and_say(args.run, args.to, args.endpoint, args.region)
    try:
        return asyncio.run(until_interrupted(pulled))
    except KeyboardInterrupt:  # a traceback said nothing, and the interpreter's teardown
        # could abort in the store client's runtime (see _QUICK_EXIT): one line, exit 130
        print(
            "swjob pull: interrupted; what landed is verified, nothing half-written is left",
            file=sys.stderr,
        )
        return 130


def _gc(args: argparse.Namespace) -> int:
    from engine.providers.gc import cli_gc
    from engine.run.abandon import Claims
    from engine.state import ownership
    from engine.state.store import Store

    store = Store()
    try:  # an unfinished run is owned while a live engine holds its lease; else abandoned
        # unfinished first: a run started between the two reads is then not in the first,
        # rather than unfinished and not yet owned (listed as abandoned)
        rows = store.unfinished()
        unfinished = {view.run_id: view.pool for view, _ in rows}
        owned = ownership.owned(store.path, rows)
        abandoned = {run: pool for run, pool in unfinished.items() if run not in owned}
        nodes.say_kept(sys.stdout)  # warm nodes: owned and billing, never orphans
        return cli_gc(
            _gc_pools(args.pools, [saved for _, saved in rows]),
            yes=args.yes,
            out=sys.stdout,
            live_run_ids=owned | nodes.holding_runs(owned),
            abandoned=set(abandoned),
            abandoned_pools=abandoned,
            claims=Claims(store),
            claim=frozenset(args.claim),
        )
    finally:
        store.close()


def _operator_id(text: str) -> str:
    """An operator id as labels carry it: 8 hex digits."""
    if len(text) != 8 or any(c not in "0123456789abcdef" for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an operator id (8 hex digits)")
    return text


def _gc_pools(path: Path | None, kept: list[dict[str, Any]]) -> PoolSet:
    """The pools gc looks through: the pools file's, or, when it is broken, the builtins
    and the pool definitions the unfinished runs keep. A broken file stopped gc, and the
    nodes it is there to collect billed on until their orphan timeout."""
    from engine.jobs.pools import BUILTIN_LOCAL, Pool, PoolFileError, PoolSet, load_pools

    try:
        return load_pools(path)
    except PoolFileError as exc:
        print(f"warning: {exc}; gc goes on with the pools its runs keep", file=sys.stderr)
    pools = {"local": BUILTIN_LOCAL}
    for saved in kept:
        if saved.get("pool_def"):
            pool = Pool.model_validate_json(saved["pool_def"])
            pools.setdefault(pool.name, pool)
    return PoolSet(pools)


_COMMANDS = {
    "run": _run,
    "nodes": nodes.main,
    "sweep": _sweep,
    "validate": _validate,
    "plan": _plan,
    "runs": _runs,
    "logs": _logs,
    "gc": _gc,
    "attach": _attach,
    "shell": _shell,
    "forward": _forward,
    "stop": _stop,
    "offers": _offers,
    "pools": _pools,
    "completion": _completion,
    "pull": _pull,
    "notify": notify.main,
    "hosts": hosts.main,
}


if __name__ == "__main__":
    sys.exit(main())
