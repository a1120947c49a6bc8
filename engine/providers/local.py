"""The built-in `local` pool: a node is a `swjob-agent` subprocess on this machine.

Each node gets a fresh directory under the user's cache dir (an agent orphaned for the
pool's `orphan_timeout_s` stops its job and removes it itself); teardown ends the agent
(SIGTERM, which makes it stop its job; then SIGKILL after a grace period), kills what is
left of the job if the agent died without doing so (agent/procgroup.py
`kill_recorded_step_now`), and removes the directory.
The pool's `max_nodes` bounds how many nodes exist at once, adopted ones included
(engine/providers/slots.py); further runs wait in PENDING until a slot frees.

A local node is as bare as a rented one (engine/providers/localspawn.py), inside a node
directory only the operator can enter. Its agent is forked by the operator's fork server
(engine/providers/forkserver.py: its imports done once, for every node), or started
afresh where a fork cannot do.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import secrets
import shutil
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from engine.providers.base import Bootstrap, NodeHandle, Preempted, ProvisionError
from engine.providers.forkserver import ForkedAgent, ForkServerGone, until_gone
from engine.providers.localspawn import fork_server, log, node_base_env, node_root, spawn_agent
from engine.providers.slots import Slots
from engine.report import scope
from engine.report.events import BootPhase
from engine.state.paths import cache_dir

AGENT_EXIT_GRACE_S = 15.0
SECRETS_FILE = "secrets.json"  # in the node's root, beside work/: the agent deletes it
FORKED = " (forked, imports done)"
"""How a node's boot step says that its agent came from the fork server."""
FORK_ANSWER_S = 20.0
"""The longest a node waits for the fork server (its first answer follows its imports,
slow on a loaded machine) before its agent is started afresh."""
ORPHANED = 5
"""The agent's exit code once it gave up on its operator (agent/node.py, ExitCode)."""
EXPIRED = 7
"""The agent's exit code once its node, kept warm, went unclaimed for keep_warm_s."""


def run_of(node_id: str) -> str:
    """The run a local node is for: its id is `local-<run id>-<4 hex>`."""
    return node_id.removeprefix("local-")[:-5]


class _LocalNode:
    """An agent process: forked by our fork server, our child, or (after an engine
    restart) adopted by pid."""

    def __init__(
        self, pid: int, root: Path, process: ForkedAgent | asyncio.subprocess.Process | None
    ) -> None:
        self.pid = pid
        self.root = root
        self.process = process

    @property
    def adopted(self) -> bool:
        return self.process is None

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    async def wait(self) -> int | None:
        """The exit code (None for an adopted process: only its parent could reap it)."""
        if self.process is not None:
            return await self.process.wait()
        await until_gone(self.pid)
        return None


class LocalProvider:
    name = "local"

    def __init__(
        self,
        max_nodes: int,
        *,
        stop_grace_s: float = 10.0,
        launcher: Sequence[str] = (),
        agent_env: Mapping[str, str] | None = None,
        pool: str | None = None,
        on_alert: Callable[[str], None] = lambda _message: None,
        node_nice: int = 0,
    ) -> None:
        """`launcher` prefixes the agent's command line (it must exec in place, so the pid
        stays the agent's — e.g. `ip netns exec NS` puts nodes behind their own link: its
        agents are started afresh, not forked); `agent_env` adds to the agent's environment;
        `pool`: the pool's name, whose `max_nodes` every swjob process then shares, and
        `on_alert` is told when the other processes hold them all; `node_nice`: how far
        the nodes give way to the operator's processes (agent/priority.py)."""
        self._slots = Slots(max_nodes, pool)
        self._alert = on_alert
        self._nodes: dict[str, _LocalNode] = {}
        self._parked: dict[str, _LocalNode] = {}  # kept warm: a claim here takes them back
        self._stop_grace_s = stop_grace_s
        self._launcher = list(launcher)
        self._agent_env = dict(agent_env or {})
        self._nice = ("--nice", str(node_nice)) if node_nice else ()

    async def provision(self, bootstrap: Bootstrap) -> NodeHandle:
        await self._slots.take(bootstrap.run_id, self._alert)
        try:
            scope.boot_reached(BootPhase.SLOT_TAKEN)  # queueing ends, booting begins
            return await self._start(bootstrap)
        except BaseException:
            self._slots.give_back(bootstrap.run_id)
            raise

    async def _start(self, bootstrap: Bootstrap) -> NodeHandle:
        node_id = f"local-{bootstrap.run_id}-{secrets.token_hex(2)}"
        root = node_root(node_id)
        args = [
            *replace(bootstrap, on_orphan=("--on-orphan", "remove-root")).agent_args(),
            *("--root", str(root), "--grace", f"{self._stop_grace_s:g}"),
            *self._nice,
        ]
        root.mkdir(mode=0o700, parents=True)
        env = {**node_base_env(os.environ), **self._agent_env}
        try:
            args += bootstrap.write_secrets(root / SECRETS_FILE)  # outside work/; read, deleted
            process = None if self._launcher else await _fork(root, args, env)
            how = FORKED if process else ""
            if process is None:
                process = await spawn_agent(args, root=root, env=env, launcher=self._launcher)
        except OSError as exc:
            await remove_tree(root)
            raise ProvisionError(f"could not start swjob-agent: {exc.strerror}") from None
        except BaseException:  # cancelled: no node, and nothing left of it
            await remove_tree(root)
            raise
        self._nodes[node_id] = _LocalNode(process.pid, root, process)
        # the one boot step a local node has before it joins: no offer, image or install
        scope.boot_reached(BootPhase.INSTANCE_CREATED, f"swjob-agent process {process.pid}{how}")
        return NodeHandle(
            provider=self.name, node_id=node_id, offer={"pid": process.pid}, created_at=time.time()
        )

    def adopt(self, handle: NodeHandle) -> None:
        """Take back a node an earlier engine process started (crash recovery). It takes a
        slot of max_nodes without waiting for one (refusing to own a running node would be
        worse), so the runs queued here wait for it too."""
        pid = handle.offer.get("pid")
        if isinstance(pid, int) and handle.node_id not in self._nodes:
            parked = self._parked.pop(handle.node_id, None)  # our own child: reaped by us
            self._nodes[handle.node_id] = parked or _LocalNode(pid, node_root(handle.node_id), None)
            self._slots.hold(run_of(handle.node_id))

    def park(self, handle: NodeHandle) -> None:
        """The node stays warm: its agent process goes on (it exits, and removes its
        directory, when its keep time passes unclaimed); its slot is given back."""
        node = self._nodes.pop(handle.node_id, None)
        if node is not None:
            self._parked[handle.node_id] = node
            self._slots.give_back(run_of(handle.node_id))

    async def find_node(self, run_id: str) -> NodeHandle | None:
        """The node of `run_id` if its agent runs though its pid was never written down:
        the operator died between the fork server's answer (the agent had its go) and
        the record. Found by its directory, named after the run, and the agent working
        in it; adopted, so that it rejoins or is torn down like any recorded node. A
        directory with nothing in it never had an agent (_remove_if_empty): removed."""
        for root in node_roots(run_id):
            if (handle := await running_node(root)) is not None:
                self.adopt(handle)
                return handle
            _remove_if_empty(root)
        return None

    async def may_have_node(self, run_id: str) -> bool:
        """A node's directory, named after its run, is made before its agent starts and
        removed once the node is gone: without one, no node of `run_id` exists."""
        return bool(node_roots(run_id))

    async def node_exited(self, handle: NodeHandle) -> str:
        node = self._nodes.get(handle.node_id)
        if node is None:
            return "node is gone"
        code = await node.wait()
        said = "agent process exited" + (f" with code {code}" if code is not None else "")
        if code == ORPHANED:  # it gave up on its operator (one stopped past the timeout)
            said += " (orphaned: no operator within the pool's orphan_timeout_s)"
        elif code == EXPIRED:
            said += " (kept warm and not claimed within the pool's keep_warm_s)"
        return said

    async def why_not_joined(self, handle: NodeHandle) -> str | None:
        """Nothing to add: an agent process that ended is said by node_exited."""
        return None

    async def preemption(self, handle: NodeHandle) -> Preempted | None:
        """This machine never takes a node back."""
        return None

    def forget(self, node_id: str) -> None:
        """Nothing to let go: a local teardown gives its slot back whatever happens."""

    def check_can_tear_down(self) -> None:
        """A local node is a process of this user's: ending it needs nothing more."""

    async def teardown(self, handle: NodeHandle) -> None:
        node = self._nodes.pop(handle.node_id, None)
        if node is None:
            return
        try:
            await _end_process(node, self._stop_grace_s + AGENT_EXIT_GRACE_S)
            # off the loop: a workspace of thousands of files takes seconds to remove
            # (the console froze for them), and psutil's kill walks /proc
            await asyncio.to_thread(_clear_node, node.root)
        finally:
            self._slots.give_back(run_of(handle.node_id))


async def remove_tree(root: Path) -> None:
    """Remove a node's directory in a worker thread: its size is the job's (10,000 files
    of a workspace take seconds), and the event loop serves every run and key meanwhile."""
    await asyncio.to_thread(shutil.rmtree, root, ignore_errors=True)


def node_roots(run_id: str) -> list[Path]:
    """The directories of `run_id`'s nodes on this machine (`local-<run id>-<4 hex>`)."""
    return sorted(cache_dir().joinpath("nodes").glob(f"local-{glob.escape(run_id)}-*"))


async def running_node(root: Path) -> NodeHandle | None:
    """The node whose agent works in `root`, if one does (its pid found, not recorded)."""
    pid = await asyncio.to_thread(_agent_in, root)
    try:
        born = root.stat().st_mtime
    except OSError:  # removed meanwhile: its agent gave up
        return None
    if pid is None:
        return None
    return NodeHandle(provider=LocalProvider.name, node_id=root.name, offer={"pid": pid},
                      created_at=born)  # fmt: skip


async def _fork(root: Path, args: list[str], env: dict[str, str]) -> ForkedAgent | None:
    """The node's agent forked by this process's fork server; None when there is no
    server to do it (the agent is then started afresh). A server that does not answer
    in FORK_ANSWER_S (stopped, or stuck) is killed — the agents it forked go on — so
    the next node starts a new one instead of waiting on it too."""
    try:
        server = fork_server()
        async with asyncio.timeout(FORK_ANSWER_S):
            return await server.fork(args, env, root)
    except TimeoutError:
        server.kill()
        log.info("fork server %d did not answer in %g s: killed", server.pid, FORK_ANSWER_S)
    except (ForkServerGone, OSError) as exc:
        log.info("agent not forked (%s): starting it afresh", exc)
    return None


async def _end_process(node: _LocalNode, grace_s: float) -> None:
    """SIGTERM (and SIGCONT, so a frozen agent can act on it), wait up to `grace_s`, then
    SIGKILL; reaps our own child."""
    node.signal(signal.SIGTERM)
    node.signal(signal.SIGCONT)
    try:
        async with asyncio.timeout(grace_s):
            await node.wait()
    except TimeoutError:
        node.signal(signal.SIGKILL)
        await node.wait()


def _kill_orphan_step(root: Path) -> None:
    """If the agent died without stopping its job, what is left of the job is killed: only
    what its record proves to be the step's, never a group that merely got its number."""
    record = root / "state" / "step.pgid"
    if os.path.lexists(record):  # the agent removes it when its step ends: rare
        from agent.procgroup import kill_recorded_step_now  # psutil, for this rare case only

        kill_recorded_step_now(record)


def _clear_node(root: Path) -> None:
    """What is left of a node whose agent has ended: its job's leftovers killed, then its
    directory removed (one hop to a worker thread for both)."""
    _kill_orphan_step(root)
    shutil.rmtree(root, ignore_errors=True)


def _remove_if_empty(root: Path) -> None:
    """Remove a node directory its operator died in before starting the agent (made just
    before it, _start). An agent's start first makes its agent.log there, so one empty but
    for the agent's secrets file never had an agent, and none can start in it once it is
    gone (a fork whose operator died gets no go: agent/forkserver.py). One with anything
    else in it is left as it is."""
    with contextlib.suppress(OSError):  # not empty, or gone already
        if os.listdir(root) == [SECRETS_FILE]:
            (root / SECRETS_FILE).unlink()
        root.rmdir()


def _agent_in(root: Path) -> int | None:
    """The pid of the agent working in `root` (forked or started afresh, it runs there), or
    None — also where processes cannot be listed. Working there is not proof enough: a
    user's shell `cd`'d into the node's directory to look would be adopted as its agent and
    killed at teardown, so the process must also run the agent (`python -m agent`, which
    a forked agent's command line, its server's, is too)."""
    import psutil  # for this rare case only

    where = str(root.resolve())
    try:
        for process in psutil.process_iter(["cwd", "status", "cmdline"]):
            info = process.info
            alive = info["status"] != psutil.STATUS_ZOMBIE
            if info["cwd"] == where and alive and _runs_agent(info["cmdline"] or []):
                return process.pid
    except Exception:  # psutil on a Linux without /proc fails in many ways
        return None
    return None


def _runs_agent(cmdline: list[str]) -> bool:
    return any(cmdline[i : i + 2] == ["-m", "agent"] for i in range(len(cmdline) - 1))
