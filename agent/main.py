"""`swjob-agent`: the command line a provider runs on a node.

The join token (`SWJOB_JOIN_TOKEN`) and the run's re-attach credential
(`SWJOB_REATTACH_KEY`, agent/reattach.py) come only from the environment, never
argv, so they show in neither `ps` nor a provider's instance listing; they are taken
out of the environment at once so no job process inherits them. `--fork-server`
(agent/forkserver.py) imports everything once, then forks one agent per request on
stdin: how the local pool starts its nodes.

Exit codes: 0 shutdown (asked by the orchestrator, or SIGTERM/SIGINT), 2 usage,
3 rejected by the orchestrator, 5 orphaned (no orchestrator reachable for
--orphan-timeout; the job was stopped and the node released as --on-orphan says:
nothing more, its --root removed, or its own Vast.ai instance destroyed), 6 expired (a
node kept warm after its run, agent/warm.py, was not claimed within its keep time; it
released itself the same way).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from agent import forkserver, orphan, subreaper
from agent.node import AgentConfig, ExitCode
from agent.quickexit import exit_now
from agent.reattach import REATTACH_ENV
from agent.supervisor import TOKEN_ENV
from agent.warm import NodeLife

USAGE_ERROR = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="swjob-agent", description=__doc__.splitlines()[0])
    p.add_argument("--run-id", required=True)
    p.add_argument("--ticket", required=True, help="the orchestrator's endpoint ticket")
    p.add_argument("--orchestrator-id", required=True, help="the only endpoint id to obey")
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
    if code in (ExitCode.ORPHANED, ExitCode.EXPIRED) and cfg.on_orphan == "remove-root":
        logging.getLogger("swjob.agent").error("%s", orphan.remove_root(cfg.root))
    return int(code)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == [forkserver.FLAG]:  # everything is imported: now fork agents on request
        return forkserver.serve(main)
    args = parse_args(argv)
    token = os.environ.pop(TOKEN_ENV, "")
    reattach_key = os.environ.pop(REATTACH_ENV, "")
    if not token:
        print(f"swjob-agent: {TOKEN_ENV} must be set", file=sys.stderr)
        return USAGE_ERROR
    root = args.root.resolve()
    if not root.is_dir():  # its provider made it; gone means the node was given up
        print(f"swjob-agent: --root {root}: no such directory", file=sys.stderr)
        return USAGE_ERROR
    setup_logging(root / "logs")
    subreaper.become_subreaper()  # a step's orphans come to us, to be ended with it
    cfg = AgentConfig(
        run_id=args.run_id,
        ticket=args.ticket,
        orchestrator_id=args.orchestrator_id,
        root=root,
        token=token,
        reattach_key=reattach_key,
        grace=args.grace,
        heartbeat=args.heartbeat,
        deadline=args.deadline,
        orphan_timeout=args.orphan_timeout,
        on_orphan=args.on_orphan,
        vast_url=args.vast_url,
        installed=(_clock(args.installed[0]), _clock(args.installed[1])),
    )
    exit_now(asyncio.run(_run(cfg)))  # the operator's teardown waits for our exit
