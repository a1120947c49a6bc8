"""`swjob-agent`: the command line a provider runs on a node.

The join token comes from `--secrets-file` (read, then deleted) or from the
environment (`SWJOB_JOIN_TOKEN`: a Vast instance's env), never argv, so it shows in
neither `ps` nor a provider's instance listing; an agent started with it in its
environment re-executes itself without it (agent/credentials.py), so no job process
inherits it or reads it in the agent's /proc environ. The re-attach credential's public
half comes as `--reattach-id` (agent/reattach.py: no secret). `--fork-server`
(agent/forkserver.py) imports everything once, then forks one agent per request on
stdin: how the local pool starts its nodes.

Exit codes: 0 shutdown (asked by the orchestrator, or SIGTERM/SIGINT), 2 usage,
3 rejected by the orchestrator, 5 orphaned (no orchestrator reachable for
--orphan-timeout; the job was stopped and the node released as --on-orphan says:
nothing more, its --root removed, or its own Vast.ai instance destroyed), 6 capped
(the run's --max-dollars/--max-hours reached with no operator metering it: the job
was stopped and the node released as for an orphan; agent/budget.py), 7 expired (a
node kept warm after its run, agent/warm.py, was not claimed within its keep time; it
released itself the same way).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from agent import budget, credentials, forkserver, orphan, priority, subreaper
from agent.node import AgentConfig, ExitCode
from agent.quickexit import exit_now
from agent.warm import NodeLife

USAGE_ERROR = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="swjob-agent", description=__doc__.splitlines()[0])
    p.add_argument("--run-id", required=True)
    p.add_argument("--ticket", required=True, help="the orchestrator's endpoint ticket")
    p.add_argument("--orchestrator-id", required=True, help="the only endpoint id to obey")
    p.add_argument(
        credentials.SECRETS_FLAG,
        type=Path,
        default=None,
        help="a 0600 file holding the join token (deleted once read)",
    )
    p.add_argument(
        "--reattach-id", default="", help="the public half of the run's re-attach key pair"
    )
    p.add_argument(
        "--root",
        type=Path,
        required=True,
        help="the node's directory (it must exist): work/, logs/, state/ go here",
    )
    p.add_argument("--grace", type=float, default=10.0, help="TERM→KILL grace on shutdown (s)")
    p.add_argument("--heartbeat", type=float, default=1.0, help="heartbeat interval (s)")
    p.add_argument("--deadline", type=float, default=10.0, help="silence that means lost (s)")
    p.add_argument("--orphan-timeout", type=float, default=1800.0, help="alone → give up (s)")
    p.add_argument(
        "--on-orphan", choices=orphan.ACTIONS, default="exit", help="how an orphan lets go"
    )
    p.add_argument("--vast-url", default=orphan.VAST_URL, help="Vast.ai API (destroy-instance)")
    p.add_argument("--runpod-url", default=orphan.RUNPOD_URL, help="RunPod API (terminate-pod)")
    p.add_argument("--price-per-hour", type=float, help="what the node bills ($/h, storage too)")
    p.add_argument("--max-dollars", type=float, help="the run's dollar cap (agent/budget.py)")
    p.add_argument("--max-hours", type=float, help="the run's cap on the node's lifetime")
    p.add_argument(
        "--billed-since", type=float, help="unix s; no later than the node began to bill"
    )
    p.add_argument(
        "--nice",
        type=int,
        choices=range(priority.MAX_NICE + 1),
        default=0,
        metavar="0-19",
        help="a local node: give the operator's processes the CPU first (agent/priority.py)",
    )
    p.add_argument(
        "--installed",
        nargs=2,
        metavar=("STARTED", "ENDED"),
        default=(None, None),
        help="when the on-start command installed the agent (unix s; reported in the hello)",
    )
    return p.parse_args(argv)


def _clock(text: str | None) -> float | None:
    """A time the on-start shell took with `date +%s.%N`; None when it is not one (a `date`
    without %N prints it literally): a missing install time beats a failed boot."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _budget(args: argparse.Namespace) -> budget.Budget | None:
    """The node's own meter, when its provider gave it a start and a cap to keep."""
    if args.billed_since is None or (args.max_dollars is None and args.max_hours is None):
        return None
    return budget.Budget(
        since=args.billed_since,
        price_per_hour=args.price_per_hour,
        max_dollars=args.max_dollars,
        max_hours=args.max_hours,
    )


def setup_logging(logs_dir: Path) -> None:
    """Log to stderr (the provider captures it) and to logs/agent.log on the node."""
    logs_dir.mkdir(exist_ok=True)  # never the root itself: a node removed stays removed
    fmt = logging.Formatter("%(asctime)s swjob-agent %(levelname)s %(message)s")
    root = logging.getLogger("swjob")
    root.setLevel(logging.INFO)
    for handler in (logging.StreamHandler(sys.stderr), logging.FileHandler(logs_dir / "agent.log")):
        handler.setFormatter(fmt)
        root.addHandler(handler)


async def _run(cfg: AgentConfig) -> int:
    life = NodeLife(cfg)  # one run, or more while the node is kept warm (agent/warm.py)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, life.stop)
    code = await life.run()
    if (
        code in (ExitCode.ORPHANED, ExitCode.CAPPED, ExitCode.EXPIRED)
        and cfg.on_orphan == "remove-root"
    ):
        logging.getLogger("swjob.agent").error("%s", orphan.remove_root(cfg.root))
    return int(code)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == [forkserver.FLAG]:  # everything is imported: now fork agents on request
        return forkserver.serve(main)
    args = parse_args(argv)
    priority.give_way(args.nice)  # first: threads started later inherit it
    root = args.root.resolve()
    if not root.is_dir():  # its provider made it; gone means the node was given up
        print(f"swjob-agent: --root {root}: no such directory", file=sys.stderr)
        return USAGE_ERROR
    try:
        token = credentials.read_secrets(args.secrets_file) if args.secrets_file else ""
    except credentials.CredentialError as exc:
        print(f"swjob-agent: {exc}", file=sys.stderr)
        return USAGE_ERROR
    token = credentials.reexec_without_secrets(argv, root, token)  # returns: nothing to hide
    if not token:
        print(f"swjob-agent: no join token ({credentials.SECRETS_FLAG})", file=sys.stderr)
        return USAGE_ERROR
    setup_logging(root / "logs")
    subreaper.become_subreaper()  # a step's orphans come to us, to be ended with it
    cfg = AgentConfig(
        run_id=args.run_id,
        ticket=args.ticket,
        orchestrator_id=args.orchestrator_id,
        root=root,
        token=token,
        reattach_id=args.reattach_id,
        grace=args.grace,
        heartbeat=args.heartbeat,
        deadline=args.deadline,
        orphan_timeout=args.orphan_timeout,
        on_orphan=args.on_orphan,
        vast_url=args.vast_url,
        runpod_url=args.runpod_url,
        installed=(_clock(args.installed[0]), _clock(args.installed[1])),
        budget=_budget(args),
        nice=args.nice,
    )
    exit_now(asyncio.run(_run(cfg)))  # the operator's teardown waits for our exit
