"""`swjob-agent --fork-server`: import the agent once, then fork one agent per local node.

Most of a local node's start is its agent's imports (pydantic, iroh, asyncio and ours:
~0.35 s of CPU, more on a loaded machine). The operator keeps one fork server
(engine/providers/forkserver.py): it does those imports once and then forks a ready
agent for each node in milliseconds, however many runs come.

Its stdin carries requests, one JSON line each: `{"argv": [...], "env": {...}, "root":
DIR}` — the agent's command line, its whole environment (the node's bare one plus the
run's secrets: the server's own environment is replaced, not added to) and its node
directory (its working directory, where its output goes to agent.log). Its stdout
answers each request in order, `{"pid": N}` or `{"error": "..."}`, and says whenever an
agent it forked ends, `{"exit": N, "code": C}` (C as `subprocess` gives it: -9 for
SIGKILL), always after that agent's `pid` line. Only the agents are its children.

A forked agent waits for the server's go before it does anything: the server gives it
only once the agent's pid is on its way to the operator. An operator gone by then (the
answer cannot be written: its reader is closed) never learnt of the node: the child
removes the node's directory and exits. A server killed in between leaves a child that
hears nothing and exits, its directory left to the operator (which starts that node's
agent afresh in it). Never an agent nobody knows of, holding the run's single-use join
token.

End of file on stdin means its operator is done or gone (kill -9 included): it exits,
and the agents it forked go on — each in its own session — like any agent whose
operator went away: they wait for it to come back, then let go (agent/orphan.py).
A forked agent's `ps` line is the server's (`python -m agent --fork-server`); its pid is
the one the operator records and shows.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import NoReturn

FLAG = "--fork-server"
REFUSED = 3  # the server's exit code when it would not fork (threads at import)
CRASHED = 70  # an agent that raised past main (EX_SOFTWARE)
GO = b"g"  # the operator has the pid: be its agent
NOBODY = b"n"  # the operator is gone: nobody will ever own this node

AgentMain = Callable[[list[str]], int]


def serve(agent_main: AgentMain) -> int:
    """Answer requests until end of file on stdin; then 0. A process with threads cannot
    be forked safely (a lock held by another thread stays held in the child for good):
    if an import started one, it exits with REFUSED, and its operator starts its agents
    afresh from then on."""
    if _threads() > 1:
        return REFUSED
    signal.signal(signal.SIGCHLD, _report_exits)
    pending = b""
    while chunk := os.read(0, 1 << 16):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            # SIGCHLD waits while forking and answering: an agent's exit is never said
            # before its pid, however soon it ends
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
            try:
                _answer(line, agent_main)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
    return 0


def _threads() -> int:
    """This process's threads: native ones too where /proc lists them (a library's own
    runtime threads are invisible to `threading`)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _answer(line: bytes, agent_main: AgentMain) -> None:
    try:
        request = json.loads(line)
        argv = [str(arg) for arg in request["argv"]]
        env = {str(name): str(value) for name, value in request["env"].items()}
        root = str(request["root"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        _say({"error": f"bad request: {type(exc).__name__}"})
        return
    wait_go, give_go = os.pipe()
    home = os.getcwd()
    try:
        # forked in its node directory: from the first instant its pid exists it works
        # there, as an adopter finds a node whose pid was never recorded (by the agent
        # working in its directory, engine/providers/local.py); a chdir after the go came
        # too late for one scheduled late, and the adopter took the empty directory for
        # one no agent ever had
        os.chdir(root)
        pid = os.fork()
    except OSError as exc:
        os.chdir(home)
        os.close(wait_go)
        os.close(give_go)
        _say({"error": f"fork failed: {exc.strerror}"})
        return
    if pid == 0:
        os.close(give_go)
        _become_agent(wait_go, argv, env, root, agent_main)
    os.chdir(home)
    os.close(wait_go)
    try:
        os.write(give_go, GO if _say({"pid": pid}) else NOBODY)
    except BrokenPipeError:
        pass  # it died before its go: its operator gave it up and killed it on its pid
    finally:
        os.close(give_go)


def _become_agent(
    wait_go: int, argv: list[str], env: dict[str, str], root: str, agent_main: AgentMain
) -> NoReturn:
    """In the child: once the server says go, set up the process a fresh agent would
    have been, then be it."""
    code = CRASHED
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        said = os.read(wait_go, 1)
        if said == NOBODY:
            shutil.rmtree(root, ignore_errors=True)
        if said != GO:
            os._exit(0)  # the operator never learnt of us: not an agent of anyone's
        os.close(wait_go)
        os.setsid()  # its own session, as a freshly started agent: the operator decides
        os.chdir(root)
        log = os.open("agent.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((null, 0), (log, 1), (log, 2)):  # the server's pipes go
            os.dup2(fd, target)
        os.close(null)
        os.close(log)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = ["swjob-agent", *argv]
        code = agent_main(argv)
    except SystemExit as exc:  # argparse's usage error
        code = exc.code if isinstance(exc.code, int) else 2
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _report_exits(signum: int, frame: object) -> None:
    """Reap every agent that ended and say so (a handler: between two bytecodes of the loop)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _say({"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _say(message: dict[str, object]) -> bool:
    """One line on stdout: short enough that the pipe takes it whole, in one write. False
    when its reader is gone (the operator with it: the loop's end of file follows)."""
    with contextlib.suppress(BrokenPipeError):
        os.write(1, json.dumps(message).encode() + b"\n")
        return True
    return False
